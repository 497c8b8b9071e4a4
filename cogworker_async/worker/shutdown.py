"""Shutdown: one worker process's way out, in Sidekiq's phases, and the state they share.

1. quiet — ``stop()``: fetch nothing more (a job fetched meanwhile is given back; the
   dispatcher's idle wait is cancelled, ``cancelled_by_stop``);
2. stop — wait up to ``shutdown_timeout`` for running jobs (``drain_jobs``), then for
   the hooks of the last ones (``drain_hooks``);
3. hard stop — cancel what still runs: each job that never finished is given back, a
   job that did finish is settled from its outcome (shielded, bounded);
4. hand-over (``handover.py``) — pending acks are dropped from the list (their ack),
   unfiled failures handed over to ``unsettled``, everything else back on its queue;
5. retire — the heartbeat stops and the process leaves the registries.

``hard_stop()`` (a second signal) skips what is left of 2, and of the settles before 4.
``stop_when_done`` is the quiet of ``max_jobs``: once what was fetched has run. Phases 4
and 5 run in ``leave``, shielded, once the manager's task groups are done.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import anyio

from cogworker_async.errors import why
from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings
from cogworker_async.worker import handover
from cogworker_async.worker.heartbeat import Heartbeat
from cogworker_async.worker.hooks import HOOK_DRAIN, HookRunner
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.reconcile import Reconciler
from cogworker_async.worker.settlement import Settler
from cogworker_async.worker.stats_flush import StatsFlusher

log = logging.getLogger(__name__)

HANDOVER_TIMEOUT: Final = 10.0
"""Seconds the final hand-over may take at shutdown, even when cancelled."""


class Shutdown:
    """Whether and how this process is stopping, and the phases of its way out.
    ``reliable``: reliable fetch (only then is anything left to settle or hand over)."""

    def __init__(self, settings: Settings, ledger: Ledger, *, identity: str, store: Store,
                 reliable: bool, settler: Settler, reconciler: Reconciler,
                 relist: handover.Relist, heartbeat: Heartbeat, stats: StatsFlusher) -> None:
        self.settings = settings
        self.ledger = ledger
        self.identity = identity
        self.store = store
        self.reliable = reliable
        self.settler = settler
        self.reconciler = reconciler
        self.relist = relist
        self.heartbeat = heartbeat
        self.stats = stats
        self.budget_spent = False
        """It stopped because it had fetched ``max_jobs`` jobs (``run`` exits 4 under a
        supervisor, which then starts a fresh process)."""
        self._stopping = anyio.Event()
        self._hard = False
        self._idle_scope: anyio.CancelScope | None = None
        self._drain_scope: anyio.CancelScope | None = None
        self._settle_scope: anyio.CancelScope | None = None
        self._stop_at: float | None = None
        """``time.monotonic()`` of the first ``stop()``: shutdown_timeout counts from it."""
        self._finished = anyio.Event()

    # -- 1. quiet, and 3. hard stop ------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def hard(self) -> bool:
        return self._hard

    def stop(self) -> None:
        """Quiet: fetch nothing more; running jobs get ``shutdown_timeout`` to finish."""
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        self._stopping.set()
        self.ledger.slots.nudge()
        if self._idle_scope is not None:
            self._idle_scope.cancel()

    def hard_stop(self) -> None:
        """Stop now: running jobs are cancelled (and given back) without waiting."""
        self._hard = True
        self.stop()
        for scope in (self._drain_scope, self._settle_scope):
            if scope is not None:
                scope.cancel()

    async def wait_stop(self) -> None:
        """Return once ``stop()`` has been called."""
        await self._stopping.wait()

    @contextmanager
    def cancelled_by_stop(self) -> Iterator[anyio.CancelScope]:
        """A scope that ``stop()`` cancels (the dispatcher's wait for work)."""
        try:
            with anyio.CancelScope() as self._idle_scope:
                yield self._idle_scope
        finally:
            self._idle_scope = None

    async def stop_when_done(self) -> None:
        """``max_jobs`` reached: stop once what was fetched has run (a stop now would
        give it back), for a fresh process to take over."""
        log.info("fetched %d jobs (max_jobs): stopping once they are done",
                 self.ledger.admitted)
        self.budget_spent = True
        slots = self.ledger.slots
        while not slots.idle and not self.stopping:
            await slots.fresh_nudge().wait()
        self.stop()

    # -- 2. stop: the running jobs, then their hooks, get shutdown_timeout ---------------

    def time_left(self, cap: float) -> float:
        """Seconds left of ``shutdown_timeout`` since the stop, at most ``cap``."""
        now = time.monotonic()
        deadline = (self._stop_at or now) + self.settings.shutdown_timeout
        return max(0.0, min(cap, deadline - now))

    async def drain_jobs(self) -> None:
        """Wait up to ``shutdown_timeout`` for the running jobs (not after a hard stop),
        then say which stop cuts the rest short. Each is given back (``processor.py``:
        a job cancelled at shutdown never finished), so the line says so: a user who
        pressed Ctrl-C twice must not read a timeout that never elapsed, nor fear a loss."""
        slots = self.ledger.slots
        if not self._hard:
            with anyio.move_on_after(self.settings.shutdown_timeout) as scope:
                self._drain_scope = scope
                while not slots.idle:
                    await slots.fresh_nudge().wait()
        if slots.idle:
            return
        running = slots.total - slots.free
        if self._hard:  # the drain's wait was cut short, or never began
            log.warning("stopping at once (a second signal, or hard_stop()): cancelling "
                        "%d job(s) now; they are given back to their queue", running)
        else:
            log.warning("shutdown: cancelling %d job(s) still running after %.0fs; they "
                        "are given back to their queue", running,
                        self.settings.shutdown_timeout)

    async def drain_hooks(self, hooks: HookRunner) -> None:
        """The failures of the last jobs reach their hooks (a hard stop cancels the
        wait, as it does the jobs')."""
        if self._hard:
            return
        with anyio.CancelScope() as self._drain_scope:
            await hooks.drain(self.time_left(HOOK_DRAIN))

    # -- 4. hand-over and 5. retire, once the task groups are done -----------------------

    async def leave(self) -> None:
        """Settle, hand over, retire (each shielded, bounded); then ``wait_finished``
        returns."""
        await self._settle_before_leaving()
        with anyio.move_on_after(HANDOVER_TIMEOUT, shield=True):
            await self._hand_over()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._retire)
        self._finished.set()

    async def wait_finished(self) -> None:
        """Return once ``leave`` has finished."""
        await self._finished.wait()

    async def _settle_before_leaving(self) -> None:
        """Jobs that ran but are not settled in Redis (it is down) get what is left of
        ``shutdown_timeout`` to settle (``handover.settle_pending_until``), shielded: a
        second signal (``hard_stop``) ends it."""
        if not self.reliable or not self.ledger.pending or self._hard:
            return
        deadline = (self._stop_at or time.monotonic()) + self.settings.shutdown_timeout
        with anyio.CancelScope(shield=True) as self._settle_scope:
            await handover.settle_pending_until(self.reconciler, self.ledger, deadline,
                                                self.relist)
        self._settle_scope = None

    async def _hand_over(self) -> None:
        """Shutdown: settle what can be settled, hand over what ran and failed, requeue
        what never finished (see ``handover.py``)."""
        await self.stats.flush_all()
        if self.reliable:
            with anyio.move_on_after(HANDOVER_TIMEOUT / 2):
                await handover.relist_if_wanted(self.ledger, self.relist)
                await self.reconciler.settle_pending()  # a last try: Redis may be back
            await handover.hand_over(self.store, self.settler, self.ledger, self.identity,
                                     self.settings.queue_names)

    def _retire(self) -> None:
        """Stop beating; leave the registries if nothing is left in progress."""
        self.heartbeat.stop()
        try:
            self.heartbeat.writer.retire()
        except Exception as exc:
            log.warning("couldn't deregister %s (%s): it will be found dead and forgotten",
                        self.identity, why(exc))
        finally:
            self.heartbeat.writer.close()
