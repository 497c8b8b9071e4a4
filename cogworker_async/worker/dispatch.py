"""Dispatch: the loop that fetches while processor slots are free, and the processors
that run what it fetched.

Every fetched job is admitted to the ledger (``Ledger.admit``) *before* a processor
takes it from the in-memory inbox: a fetched job is never a stray. While the ledger
has too many outcomes not yet settled in Redis (``Ledger.backpressure``), or no free
slot, nothing is fetched. A failed fetch is paused after, doubling up to
``FETCH_ERROR_PAUSE``; an empty one waits for work (``Fetcher.wait``) until a wake-up,
the idle interval, or ``stop()``. Once stopping, a job fetched or taken meanwhile is
given back, never started. ``max_jobs`` is counted here (``Shutdown.stop_when_done``).
"""

from __future__ import annotations

import asyncio
from typing import Final

import anyio
from anyio.abc import TaskGroup

from cogworker_async.redis.errors import Unavailable
from cogworker_async.settings import Settings
from cogworker_async.worker.fetch import Fetcher, Work
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.outcome import GiveBack
from cogworker_async.worker.processor import Processor
from cogworker_async.worker.scopes import cancel_scope
from cogworker_async.worker.settlement import Settler
from cogworker_async.worker.shutdown import Shutdown
from cogworker_async.worker.streak import Streak

FETCH_ERROR_PAUSE: Final = (0.1, 2.0)
"""First and longest pause after a failed fetch (doubling in between)."""


class Dispatcher:
    """Feeds ``Processor.process`` through ``processor_loop`` (one per slot) from ``run``.
    ``fetch_streak`` and ``idle_streak``: the fetches' and the idle waits' failures."""

    def __init__(self, settings: Settings, ledger: Ledger, fetcher: Fetcher, settler: Settler,
                 processor: Processor, shutdown: Shutdown, *, fetch_streak: Streak,
                 idle_streak: Streak) -> None:
        self.settings = settings
        self.ledger = ledger
        self.fetcher = fetcher
        self.settler = settler
        self.processor = processor
        self.shutdown = shutdown
        self.fetch_streak = fetch_streak
        self.idle_streak = idle_streak
        self._inbox: asyncio.Queue[Work] = asyncio.Queue()

    async def run(self, jobs: TaskGroup) -> None:
        """Fetch while slots are free, hand each job to a processor; return once stopping."""
        ledger, slots, shutdown = self.ledger, self.ledger.slots, self.shutdown
        pause = FETCH_ERROR_PAUSE[0]
        while not shutdown.stopping:
            nudge = slots.fresh_nudge()
            if slots.free == 0 or ledger.backpressure:
                with anyio.move_on_after(self.settings.idle_fetch_interval):
                    await nudge.wait()
                continue
            want = slots.free if self.settings.max_jobs is None else self._budget()
            if want <= 0:
                await shutdown.stop_when_done()
                break
            try:
                ledger.fetch_began()
                works = await self.fetcher.fetch(want)
            except Exception as exc:
                # The reply may be lost after the script ran: its jobs are then on our
                # list with nobody running them; reconcile requeues such strays. Not
                # "fetching" during the pause (see ``Ledger.fetching``). Anything else
                # than Redis away is a bug, shown with its traceback; the loop still
                # goes on (a worker that stopped fetching would keep its slots idle).
                ledger.fetch_ended()
                self.fetch_streak.failed(exc, trace=not isinstance(exc, Unavailable))
                with anyio.move_on_after(pause):
                    await shutdown.wait_stop()
                pause = min(pause * 2, FETCH_ERROR_PAUSE[1])
                continue
            finally:
                ledger.fetch_ended()
            self.fetch_streak.succeeded()
            pause = FETCH_ERROR_PAUSE[0]
            if not works:
                works = await self._wait_idle(nudge)
                if not works:
                    continue
            for work in works:
                if shutdown.stopping:  # fetched while stopping: it never started
                    jobs.start_soon(self.settler.settle, work, GiveBack())
                    continue
                ledger.admit(work)
                self._inbox.put_nowait(work)

    def _budget(self) -> int:
        """``max_jobs`` (``run --max-jobs``): how many more jobs to fetch now."""
        assert self.settings.max_jobs is not None
        return min(self.ledger.slots.free, self.settings.max_jobs - self.ledger.admitted)

    async def _wait_idle(self, nudge: anyio.Event) -> list[Work]:
        """Nothing was queued: wait for work, until ``stop()`` cancels the wait."""
        works: list[Work] = []
        try:
            with self.shutdown.cancelled_by_stop():
                if not self.shutdown.stopping:
                    works = await self.fetcher.wait(nudge, self.settings.idle_fetch_interval)
        except Exception as exc:  # as for a fetch: Redis away, or a bug shown once
            self.idle_streak.failed(exc, trace=not isinstance(exc, Unavailable))
            with anyio.move_on_after(FETCH_ERROR_PAUSE[1]):
                await self.shutdown.wait_stop()
        else:
            self.idle_streak.succeeded()
        return works

    async def processor_loop(self) -> None:
        """One processor slot: take the next fetched job, run it, settle it, repeat."""
        inbox = self._inbox
        process = self.processor.process
        shutdown = self.shutdown
        while True:
            work = await inbox.get()
            if shutdown.stopping:  # quiet: a job that has not started is not started now
                self.ledger.finish(work)
                with cancel_scope(shield=True):
                    await self.settler.settle(work, GiveBack())
                self.ledger.slots.release()
                continue
            await process(work)
