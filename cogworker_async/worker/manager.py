"""Manager: one worker process's task group and lifecycle.

It builds the worker's parts around one ``Ledger`` (what runs, outcomes not yet settled
in Redis, free slots: see ``ledger.py``) and owns the tasks: the dispatcher that
fetches while slots are free, the processors that run what it fetched, the poller, the
cron ticker, the wake-up listener, orphan recovery and reconcile
(``recovery.run_upkeep``), fencing, the loop-lag probe and the counters' flusher; plus
the heartbeat on its own thread. The first beat is written before the first fetch.

Shutdown, in Sidekiq's phases:
1. quiet — ``stop()``: fetch nothing more (a job fetched meanwhile is given back);
2. stop — wait up to ``shutdown_timeout`` for running jobs;
3. hard stop — cancel what still runs: each job that never finished is given back, a
   job that did finish is settled from its outcome (shielded, bounded);
4. hand-over (``handover.py``) — pending acks are dropped from the list (their ack),
   unfiled failures handed over to ``unsettled``, everything else back on its queue;
5. retire — the heartbeat stops and the process leaves the registries.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from cogworker_async.definition import JobDefinition
from cogworker_async.errors import why
from cogworker_async.limiter import LimitSpec
from cogworker_async.middleware import ServerMiddleware
from cogworker_async.periodic import Periodic
from cogworker_async.redis import limits
from cogworker_async.redis.beats import BeatWriter
from cogworker_async.redis.connection import SOCKET_TIMEOUT
from cogworker_async.redis.errors import (
    AuthenticationError,
    ClusterUnreachable,
    ConnectionLost,
    Unavailable,
)
from cogworker_async.redis.store import StatsFlush, Store
from cogworker_async.run_metrics import Tally
from cogworker_async.settings import Settings, unserved_limits
from cogworker_async.version import __version__
from cogworker_async.worker import handover
from cogworker_async.worker.canceller import Canceller
from cogworker_async.worker.cron import CronTicker, periodic_job
from cogworker_async.worker.execute import Counters
from cogworker_async.worker.fencing import Fence
from cogworker_async.worker.fetch import BasicFetch, Fetcher, ReliableFetch, Work
from cogworker_async.worker.heartbeat import LAG_PROBE_INTERVAL, Heartbeat, LoopLag
from cogworker_async.worker.hooks import HOOK_DRAIN, HookRunner, Hooks
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.observers import Observers, Vitals, process_metrics
from cogworker_async.worker.outcome import GiveBack
from cogworker_async.worker.poller import Poller
from cogworker_async.worker.processor import Processor
from cogworker_async.worker.reconcile import Reconciler
from cogworker_async.worker.recovery import Recovery, run_upkeep
from cogworker_async.worker.settlement import Settler
from cogworker_async.worker.streak import Streak

log = logging.getLogger(__name__)

HANDOVER_TIMEOUT: Final = 10.0
"""Seconds the final hand-over may take at shutdown, even when cancelled."""
STATS_FLUSH_INTERVAL: Final = 1.0
FETCH_ERROR_PAUSE: Final = (0.1, 2.0)
"""First and longest pause after a failed fetch (doubling in between)."""
WAKE_RETRY_PAUSE: Final = 1.0


def new_identity() -> str:
    """host:pid:random — unique per process start, readable in the dashboard."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(slots=True)
class LoopStreaks:
    """The dispatcher's loops' failure streaks: each says once that it is failing and
    once that it recovered (see ``streak.py``)."""

    fetch: Streak = field(default_factory=lambda: Streak("fetch"))
    idle_wait: Streak = field(default_factory=lambda: Streak("waiting for jobs"))
    wake_ups: Streak = field(default_factory=lambda: Streak("wake-up channel"))
    stats: Streak = field(default_factory=lambda: Streak("stats flush"))


class Manager:
    def __init__(
        self,
        registry: Mapping[str, JobDefinition],
        settings: Settings,
        store: Store,
        url: str,
        *,
        periodics: Sequence[Periodic] = (),
        middleware: Sequence[ServerMiddleware] = (),
        hooks: Hooks | None = None,
        limiters: Mapping[str, LimitSpec] | None = None,
    ) -> None:
        self.settings = settings
        self.limiters = dict(limiters or {})
        """The App's limiters, registered at start (``_register_limiters``)."""
        self.store = store
        self.identity = settings.identity or new_identity()
        reliable = settings.fetch == "reliable"
        # Reliable fetch may hold ``prefetch`` fetched jobs beyond the running ones (safe:
        # they are on this process's in-progress list), so a processor need not wait a
        # round trip for its next job — at the price of those jobs waiting here while
        # another process may be idle. Off by default.
        self.ledger = Ledger(settings.concurrency + (settings.prefetch if reliable else 0),
                             settings.concurrency)
        self.counters = Counters()
        self.budget_spent = False
        """It stopped because it had fetched ``max_jobs`` jobs (``run`` exits 4 under a
        supervisor, which then starts a fresh process)."""
        self.tally = Tally()
        self._flushes = 0
        self._flusher = f"{self.identity}:{secrets.token_hex(4)}"
        """Whose flush numbers these are: this run of the process (an identity may be
        configured, and reused by the next run, whose numbers start at 1 again)."""
        self._unconfirmed: StatsFlush | None = None
        """A stats flush not known to be applied: sent again, as it is, next time."""
        self.hooks = HookRunner(hooks) if hooks else None
        self.metrics = process_metrics(settings, self.vitals, registry.keys())
        # The run metrics' tally is fed by the processor directly (always on, the
        # cheapest path); observers only when there are any.
        self.observers = Observers([o for o in (self.hooks, self.metrics) if o is not None])
        self.fetcher: Fetcher = (
            ReliableFetch(store, settings, self.identity) if reliable
            else BasicFetch(store, settings)
        )
        self.settler = Settler(store, self.identity, reliable=reliable, ledger=self.ledger)
        self.canceller = Canceller(store, self.identity, settings.queue_names)
        self.processor = Processor(registry, settings, self.settler, self.counters,
                                   self.ledger, store=store, middleware=middleware,
                                   observers=self.observers, tally=self.tally,
                                   canceller=self.canceller)
        self.cron = CronTicker(store, periodics, partial(periodic_job, registry))
        self.poller = Poller(store, settings)
        self.lag = LoopLag()
        self.fence = Fence(store, self.identity, self.ledger, queues=settings.queue_names,
                           retry_pause=settings.heartbeat_interval)
        self.heartbeat = Heartbeat(
            # A beat gives up after one interval: a hung node must not delay the next
            # beats past the alive markers' TTL (orphan_threshold).
            BeatWriter(url, store.keys, self.identity, settings.queue_names,
                       timeout=min(SOCKET_TIMEOUT, max(1.0, settings.heartbeat_interval))),
            interval=settings.heartbeat_interval, ttl=settings.orphan_threshold,
            describe=self._describe, current_jobs=self.ledger.snapshot,
            on_zombie=self.fence.declared_dead_from_thread,
            on_forgotten=self.fence.forgotten_from_thread,
            on_alive=self.fence.alive_from_thread,
        )
        self.ledger.beats = lambda: self.heartbeat.beats_started
        # No judging others dead in a queue's slot until our own beats there have
        # succeeded for orphan_threshold (see Recovery.recover_orphans): after a Redis
        # outage (or a shard's) every stamp there is stale.
        threshold = settings.orphan_threshold
        self.recovery = Recovery(store, settings, self.identity, may_judge=lambda queue: (
            self.heartbeat.steady_in(queue, threshold)), observers=self.observers)
        self.reconciler = Reconciler(store, self.settler, self.identity,
                                     settings.queue_names, self.ledger)
        self._upkeep: TaskGroup | None = None
        self._inbox: asyncio.Queue[Work] = asyncio.Queue()
        self._idle_scope: anyio.CancelScope | None = None
        self._stopping = anyio.Event()
        self._hard = False
        self._drain_scope: anyio.CancelScope | None = None
        self._settle_scope: anyio.CancelScope | None = None
        self._stop_at: float | None = None
        """``time.monotonic()`` of the first ``stop()``: shutdown_timeout counts from it."""
        self._finished = anyio.Event()

    @cached_property
    def streaks(self) -> LoopStreaks:
        return LoopStreaks()

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

    async def _first_beat(self) -> None:
        """The first beat, tried again for up to ``orphan_threshold`` on a lost
        connection: one lost packet (a SYN on a lossy link: measured, 1 start in 16 at 5 %
        loss) must not end a worker that has just reached Redis. A first beat is safe to
        send twice (nothing is fetched before it). A refusal (a wrong password, NOPERM)
        fails at once."""
        deadline = time.monotonic() + self.settings.orphan_threshold
        while True:
            try:
                await anyio.to_thread.run_sync(self.heartbeat.beat)
                return
            except (*ConnectionLost, ClusterUnreachable) as exc:
                if isinstance(exc, AuthenticationError) or time.monotonic() >= deadline:
                    raise
                log.warning("first heartbeat failed (%s); trying again", why(exc))
                await anyio.sleep(self.settings.heartbeat_interval)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Work until ``stop()``; ready (``task_status.started()``) once it can fetch.
        The metrics server, if any, listens first: a port in use stops the start before
        this process is registered anywhere."""
        if self.metrics is None:
            await self._work(task_status=task_status)
            return
        async with anyio.create_task_group() as metrics:
            await metrics.start(self.metrics.serve)
            try:
                await self._work(task_status=task_status)
            finally:
                metrics.cancel_scope.cancel()

    async def _work(self, *, task_status: TaskStatus[None]) -> None:
        reliable = self.fetcher.reliable
        await self.store.check_server(reliable=reliable)
        # Served queues are registered (the dashboard, the poller and recovery find each
        # queue's slot through the registry) before anything is fetched from them.
        await self.store.register_queues(self.settings.queue_names)
        await self._register_limiters()
        # The first beat before the first fetch: a job must never sit on the list of a
        # process that recovery could not yet see as alive.
        await self._first_beat()
        self.heartbeat.start()
        log.info("worker %s started: queues %s, concurrency %d, %s fetch", self.identity,
                 self.settings.queue_names, self.settings.concurrency,
                 "reliable" if reliable else "basic (running jobs are lost on a crash)")
        for name in unserved_limits(self.settings):
            log.warning("queue_limits names queue %r, which this worker does not serve "
                        "(queues %s): a typo? Its limit does nothing here", name,
                        self.settings.queue_names)
        try:
            async with anyio.create_task_group() as upkeep:
                self._upkeep = upkeep
                if reliable:
                    await upkeep.start(self._listen_for_wake_ups)
                    upkeep.start_soon(run_upkeep, self.recovery, self.reconciler,
                                      self.settings, self.identity, self.processor.runner)
                upkeep.start_soon(self.poller.run)
                upkeep.start_soon(self.cron.run)
                upkeep.start_soon(self._flush_stats_forever)
                if self.hooks is not None:
                    upkeep.start_soon(self.hooks.run)
                upkeep.start_soon(self._probe_lag)
                upkeep.start_soon(self.fence.run)
                if self.settings.tracked:  # cancels come through the records
                    upkeep.start_soon(self.canceller.run)
                async with anyio.create_task_group() as jobs:
                    # N long-lived processors, fed through an in-memory inbox: no task
                    # to create per job (a measurable share of a no-op job's cost).
                    for _ in range(self.settings.concurrency):
                        jobs.start_soon(self._processor_loop)
                    task_status.started()
                    await self._dispatch(jobs)
                    await self._drain()
                    jobs.cancel_scope.cancel()
                if self.hooks is not None and not self._hard:
                    # The failures of the last jobs reach their hooks (a hard stop
                    # cancels the wait, as it does the jobs').
                    with anyio.CancelScope() as self._drain_scope:
                        await self.hooks.drain(self._time_left(HOOK_DRAIN))
                upkeep.cancel_scope.cancel()
        finally:
            self._upkeep = None
            await self._settle_before_leaving()
            with anyio.move_on_after(HANDOVER_TIMEOUT, shield=True):
                await self._hand_over()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._retire)
            self._finished.set()
            log.info("worker %s stopped", self.identity)

    async def _register_limiters(self) -> None:
        """List the App's limiters where the dashboard and the CLI find them, and free
        the slots an earlier process of this identity held — before the first job,
        while this process holds none. Best effort: a limiter works unlisted."""
        try:
            await limits.register(self.store, self.limiters, self.identity)
        except Unavailable as exc:
            log.warning("couldn't register the limiters: %s", why(exc))

    def _budget(self) -> int:
        """``max_jobs`` (``run --max-jobs``): how many more jobs to fetch now."""
        assert self.settings.max_jobs is not None
        return min(self.ledger.slots.free, self.settings.max_jobs - self.ledger.admitted)

    async def _stop_when_done(self) -> None:
        """``max_jobs`` reached: stop once what was fetched has run (a stop now would
        give it back), for a fresh process to take over."""
        log.info("fetched %d jobs (max_jobs): stopping once they are done",
                 self.ledger.admitted)
        self.budget_spent = True
        slots = self.ledger.slots
        while not slots.idle and not self.stopping:
            await slots.fresh_nudge().wait()
        self.stop()

    async def _dispatch(self, jobs: TaskGroup) -> None:
        """Fetch while slots are free, hand each job to a processor; return once stopping."""
        ledger, slots = self.ledger, self.ledger.slots
        pause = FETCH_ERROR_PAUSE[0]
        while not self.stopping:
            nudge = slots.fresh_nudge()
            if slots.free == 0 or ledger.backpressure:
                with anyio.move_on_after(self.settings.idle_fetch_interval):
                    await nudge.wait()
                continue
            want = slots.free if self.settings.max_jobs is None else self._budget()
            if want <= 0:
                await self._stop_when_done()
                break
            try:
                ledger.fetching = True
                works = await self.fetcher.fetch(want)
            except Exception as exc:
                # The reply may be lost after the script ran: its jobs are then on our
                # list with nobody running them; reconcile requeues such strays. Not
                # "fetching" during the pause (see ``Ledger.fetching``). Anything else
                # than Redis away is a bug, shown with its traceback; the loop still
                # goes on (a worker that stopped fetching would keep its slots idle).
                ledger.fetching = False
                self.streaks.fetch.failed(exc, trace=not isinstance(exc, Unavailable))
                with anyio.move_on_after(pause):
                    await self._stopping.wait()
                pause = min(pause * 2, FETCH_ERROR_PAUSE[1])
                continue
            finally:
                ledger.fetching = False
            self.streaks.fetch.succeeded()
            pause = FETCH_ERROR_PAUSE[0]
            if not works:
                works = await self._wait_idle(nudge)
                if not works:
                    continue
            for work in works:
                if self.stopping:  # fetched while stopping: it never started
                    jobs.start_soon(self.settler.settle, work, GiveBack())
                    continue
                ledger.admit(work)
                self._inbox.put_nowait(work)

    async def _wait_idle(self, nudge: anyio.Event) -> list[Work]:
        """Nothing was queued: wait for work, until ``stop()`` cancels the wait."""
        works: list[Work] = []
        try:
            with anyio.CancelScope() as self._idle_scope:
                if not self.stopping:
                    works = await self.fetcher.wait(nudge, self.settings.idle_fetch_interval)
        except Exception as exc:  # as for a fetch: Redis away, or a bug shown once
            self.streaks.idle_wait.failed(exc, trace=not isinstance(exc, Unavailable))
            with anyio.move_on_after(FETCH_ERROR_PAUSE[1]):
                await self._stopping.wait()
        else:
            self.streaks.idle_wait.succeeded()
        finally:
            self._idle_scope = None
        return works

    async def _processor_loop(self) -> None:
        """One processor slot: take the next fetched job, run it, settle it, repeat."""
        inbox = self._inbox
        process = self.processor.process
        while True:
            work = await inbox.get()
            if self.stopping:  # quiet: a job that has not started is not started now
                self.ledger.finish(work)
                with anyio.CancelScope(shield=True):
                    await self.settler.settle(work, GiveBack())
                self.ledger.slots.release()
                continue
            await process(work)

    def _time_left(self, cap: float) -> float:
        """Seconds left of ``shutdown_timeout`` since the stop, at most ``cap``."""
        now = time.monotonic()
        deadline = (self._stop_at or now) + self.settings.shutdown_timeout
        return max(0.0, min(cap, deadline - now))

    async def _drain(self) -> None:
        if self._hard:
            return
        slots = self.ledger.slots
        with anyio.move_on_after(self.settings.shutdown_timeout) as scope:
            self._drain_scope = scope
            while not slots.idle:
                await slots.fresh_nudge().wait()
        if not slots.idle:
            log.warning("shutdown: cancelling %d job(s) still running after %.0fs",
                        slots.total - slots.free, self.settings.shutdown_timeout)

    async def _listen_for_wake_ups(self, *, task_status: TaskStatus[None]) -> None:
        """Each enqueue publishes a wake-up: an idle worker fetches within a round trip."""
        started = False
        streak = self.streaks.wake_ups
        while True:
            try:
                async with self.store.wake_ups() as messages:
                    streak.succeeded()
                    if not started:
                        started = True
                        task_status.started()
                    self.ledger.slots.nudge()
                    async for _ in messages:
                        self.ledger.slots.nudge()
            except Exception as exc:  # lost connection: idle fetches poll until it is back
                if not started:
                    started = True
                    task_status.started()
                streak.failed(exc)
                await anyio.sleep(WAKE_RETRY_PAUSE)

    async def _probe_lag(self) -> None:
        """Measure how late the loop wakes up; the beat reports the worst lag."""
        while True:
            began = anyio.current_time()
            await anyio.sleep(LAG_PROBE_INTERVAL)
            self.lag.tick(max(0.0, anyio.current_time() - began - LAG_PROBE_INTERVAL))

    # -- called from the heartbeat thread --------------------------------------------

    def _describe(self) -> dict[str, object]:
        return {
            "identity": self.identity,
            "queues": self.settings.queue_names,
            "concurrency": self.settings.concurrency,
            "busy": self.ledger.busy,
            "pending": len(self.ledger.pending),
            "fetch": self.settings.fetch,
            "lag_ms": round(self.lag.take() * 1000, 1),
            "version": __version__,
        }

    async def _flush_stats_forever(self) -> None:
        while True:
            await anyio.sleep(STATS_FLUSH_INTERVAL)
            await self._flush_stats()

    def vitals(self) -> Vitals:
        """This process's gauges, right now (safe from a metrics server's thread)."""
        return Vitals(busy=self.ledger.busy, concurrency=self.settings.concurrency,
                      pending=len(self.ledger.pending), loop_lag=self.lag.latest)

    async def _flush_stats(self) -> None:
        """Send the counts and run metrics gathered since the last flush. A flush that
        fails (or is cancelled: the shutdown's hand-over flushes again) is kept and sent
        again as it was, under its number, before anything newer: Redis applies each
        number once (``add_stats.lua``), so a lost reply never counts twice."""
        flush = self._unconfirmed
        if flush is None:
            counters = self.counters
            processed, failed = counters.processed, counters.failed
            if not processed and not failed and not self.tally:
                return
            self._flushes += 1
            flush = self._unconfirmed = StatsFlush(self._flushes, processed, failed,
                                                   self.tally.take())
            counters.processed -= processed
            counters.failed -= failed
        try:
            await self.store.flush_stats(self._flusher, flush)
        except Exception as exc:  # kept for the next flush (a bug: shown once, traced)
            self.streaks.stats.failed(exc, trace=not isinstance(exc, Unavailable))
            return
        self._unconfirmed = None
        self.streaks.stats.succeeded()

    async def _settle_before_leaving(self) -> None:
        """Jobs that ran but are not settled in Redis (it is down) get what is left of
        ``shutdown_timeout`` to settle (``handover.settle_pending_until``), shielded: a
        second signal (``hard_stop``) ends it."""
        if not self.fetcher.reliable or not self.ledger.pending or self._hard:
            return
        deadline = (self._stop_at or time.monotonic()) + self.settings.shutdown_timeout
        with anyio.CancelScope(shield=True) as self._settle_scope:
            await handover.settle_pending_until(self.reconciler, self.ledger, deadline,
                                                self.fence.relist)
        self._settle_scope = None

    async def _hand_over(self) -> None:
        """Shutdown: settle what can be settled, hand over what ran and failed, requeue
        what never finished (see ``handover.py``)."""
        await self._flush_stats()
        if self._unconfirmed is None:  # that was an older flush sent again: now the rest
            await self._flush_stats()
        if self.fetcher.reliable:
            with anyio.move_on_after(HANDOVER_TIMEOUT / 2):
                await handover.relist_if_wanted(self.ledger, self.fence.relist)
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
