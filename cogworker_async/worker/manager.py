"""Manager: one worker process's task group and lifecycle.

It owns the shared state — what is running (``running``), outcomes not yet settled in
Redis (``pending``), free slots, in-memory stats — and the tasks: the dispatcher that
fetches while slots are free, one task per running job, the poller, the wake-up
listener, the pending-settlement retrier and the stats flusher.

Shutdown, in Sidekiq's phases:
1. quiet — ``stop()``: fetch nothing more (a job fetched meanwhile is given back);
2. stop — wait up to ``shutdown_timeout`` for running jobs;
3. hard stop — cancel what still runs: each job that never finished is given back, a
   job that did finish is settled from its outcome (shielded, bounded);
4. hand-over — whatever is left on this process's in-progress list (pending acks are
   dropped: that is their ack) goes back to its queue.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Mapping
from typing import Final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from cogworker_async import job
from cogworker_async.redis.store import RedisError, Store
from cogworker_async.registry import JobDefinition
from cogworker_async.settings import Settings
from cogworker_async.worker.fetch import BasicFetch, Fetcher, ReliableFetch, Work
from cogworker_async.worker.outcome import Ack, GiveBack
from cogworker_async.worker.poller import Poller
from cogworker_async.worker.processor import Processor, Stats
from cogworker_async.worker.settlement import Pending, Settler

log = logging.getLogger("cogworker_async")

HANDOVER_TIMEOUT: Final = 10.0
"""Seconds the final hand-over may take at shutdown, even when cancelled."""
STATS_FLUSH_INTERVAL: Final = 1.0
FETCH_ERROR_PAUSE: Final = (0.1, 2.0)
"""First and longest pause after a failed fetch (doubling in between)."""
WAKE_RETRY_PAUSE: Final = 1.0


def new_identity() -> str:
    """host:pid:random — unique per process start, readable in the dashboard."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Slots:
    """Free processor slots, and a nudge that wakes the dispatcher."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self._nudge = anyio.Event()

    def fresh_nudge(self) -> anyio.Event:
        """An event set by the next nudge (take it *before* looking, to miss none)."""
        if self._nudge.is_set():
            self._nudge = anyio.Event()
        return self._nudge

    def nudge(self) -> None:
        self._nudge.set()

    def release(self) -> None:
        self.free += 1
        self._nudge.set()

    @property
    def idle(self) -> bool:
        return self.free == self.total


class Manager:
    def __init__(
        self, registry: Mapping[str, JobDefinition], settings: Settings, store: Store
    ) -> None:
        self.settings = settings
        self.store = store
        self.identity = settings.identity or new_identity()
        self.running: dict[bytes, Work] = {}
        self.pending: dict[bytes, Pending] = {}
        self.stats = Stats()
        self.slots = Slots(settings.concurrency)
        reliable = settings.fetch == "reliable"
        self.fetcher: Fetcher = (
            ReliableFetch(store, settings, self.identity) if reliable
            else BasicFetch(store, settings)
        )
        self.settler = Settler(store, self.identity, reliable=reliable, pending=self.pending)
        self.processor = Processor(registry, settings, self.settler, self.stats, self.running,
                                   self.slots.release)
        self.poller = Poller(store, settings)
        self._stopping = anyio.Event()
        self._hard = False
        self._drain_scope: anyio.CancelScope | None = None
        self._finished = anyio.Event()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def stopped_hard(self) -> bool:
        return self._hard

    async def wait_stopped(self) -> None:
        """Return once ``run`` has finished (after a stop and the hand-over)."""
        await self._finished.wait()

    def stop(self) -> None:
        """Quiet: fetch nothing more; running jobs get ``shutdown_timeout`` to finish."""
        self._stopping.set()
        self.slots.nudge()

    def hard_stop(self) -> None:
        """Stop now: running jobs are cancelled (and given back) without waiting."""
        self._hard = True
        self.stop()
        if self._drain_scope is not None:
            self._drain_scope.cancel()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Work until ``stop()``; ready (``task_status.started()``) once it can fetch."""
        reliable = self.fetcher.reliable
        await self.store.check_server(reliable=reliable)
        log.info("worker %s started: queues %s, concurrency %d, %s fetch", self.identity,
                 self.settings.queue_names, self.settings.concurrency,
                 "reliable" if reliable else "basic (running jobs are lost on a crash)")
        try:
            async with anyio.create_task_group() as upkeep:
                if reliable:
                    await upkeep.start(self._listen_for_wake_ups)
                    upkeep.start_soon(self._retry_pending)
                upkeep.start_soon(self.poller.run)
                upkeep.start_soon(self._flush_stats_forever)
                async with anyio.create_task_group() as jobs:
                    task_status.started()
                    await self._dispatch(jobs)
                    await self._drain()
                    jobs.cancel_scope.cancel()
                upkeep.cancel_scope.cancel()
        finally:
            with anyio.move_on_after(HANDOVER_TIMEOUT, shield=True):
                await self._hand_over()
            self._finished.set()
            log.info("worker %s stopped", self.identity)

    async def _dispatch(self, jobs: TaskGroup) -> None:
        """Fetch while slots are free, start a task per job; return once stopping."""
        pause = FETCH_ERROR_PAUSE[0]
        while not self.stopping:
            nudge = self.slots.fresh_nudge()
            if self.slots.free == 0 or (self.pending and self._backpressure()):
                await nudge.wait()
                continue
            try:
                works = await self.fetcher.fetch(self.slots.free)
            except RedisError as exc:
                log.warning("fetch failed (%r); trying again in %.1fs", exc, pause)
                with anyio.move_on_after(pause):
                    await self._stopping.wait()
                pause = min(pause * 2, FETCH_ERROR_PAUSE[1])
                continue
            pause = FETCH_ERROR_PAUSE[0]
            if not works:
                with anyio.move_on_after(self.settings.idle_fetch_interval):
                    await nudge.wait()
                continue
            for work in works:
                if self.stopping:  # fetched while stopping: it never started
                    jobs.start_soon(self.settler.settle, work, GiveBack())
                    continue
                self.slots.free -= 1
                jobs.start_soon(self.processor.process, work)

    def _backpressure(self) -> bool:
        """Too many outcomes not yet settled in Redis: stop fetching until they are."""
        return len(self.pending) >= self.settings.concurrency * 10

    async def _drain(self) -> None:
        if self._hard:
            return
        with anyio.move_on_after(self.settings.shutdown_timeout) as scope:
            self._drain_scope = scope
            while not self.slots.idle:
                await self.slots.fresh_nudge().wait()
        if not self.slots.idle:
            log.warning("shutdown: cancelling %d job(s) still running after %.0fs",
                        self.slots.total - self.slots.free, self.settings.shutdown_timeout)

    async def _listen_for_wake_ups(self, *, task_status: TaskStatus[None]) -> None:
        """Each enqueue publishes a wake-up: an idle worker fetches within a round trip."""
        started = False
        while True:
            try:
                async with self.store.wake_ups() as messages:
                    if not started:
                        started = True
                        task_status.started()
                    self.slots.nudge()
                    async for _ in messages:
                        self.slots.nudge()
            except Exception as exc:  # lost connection: idle fetches poll until it is back
                if not started:
                    started = True
                    task_status.started()
                log.warning("wake-up channel lost (%r); reconnecting", exc)
                await anyio.sleep(WAKE_RETRY_PAUSE)

    async def _retry_pending(self) -> None:
        """Finish the settlements that failed (Redis unreachable), through the same scripts."""
        while True:
            await anyio.sleep(self.settings.recovery_interval)
            for raw, disposition in list(self.pending.items()):
                try:
                    await self.settler.apply(Work("", raw), disposition)
                except RedisError as exc:
                    log.warning("still couldn't settle jid=%s: %r", job.jid_of(raw), exc)
                    break
                self.pending.pop(raw, None)

    async def _flush_stats_forever(self) -> None:
        while True:
            await anyio.sleep(STATS_FLUSH_INTERVAL)
            await self._flush_stats()

    async def _flush_stats(self) -> None:
        processed, failed = self.stats.processed, self.stats.failed
        if not processed and not failed:
            return
        try:
            await self.store.add_stats(processed, failed)
        except RedisError as exc:
            log.warning("couldn't record stats (kept for the next flush): %r", exc)
            return
        self.stats.processed -= processed
        self.stats.failed -= failed

    async def _hand_over(self) -> None:
        """Shutdown: requeue what never finished; drop what finished (pending acks)."""
        await self._flush_stats()
        if not self.fetcher.reliable:
            return
        drop = [raw for raw, how in self.pending.items() if isinstance(how, Ack)]
        keep = [raw for raw, how in self.pending.items() if not isinstance(how, Ack)]
        try:
            moved = await self.store.requeue(self.identity, self.settings.queue_names[0],
                                             drop=drop, keep=keep)
        except RedisError as exc:
            log.error("shutdown: couldn't requeue this process's unfinished jobs (%r); "
                      "they stay in progress for orphan recovery", exc)
            return
        for raw in drop:
            self.pending.pop(raw, None)
        if moved:
            log.warning("shutdown: requeued %d unfinished job(s)", moved)
        if keep:
            log.error("shutdown: %d failed job(s) couldn't be filed; left in progress", len(keep))

