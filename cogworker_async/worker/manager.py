"""Manager: one worker process's task group and lifecycle.

It builds the worker's parts around one ``Ledger`` (what runs, outcomes not yet settled
in Redis, free slots: see ``ledger.py``), wiring them to each other late (through
lambdas and the ledger's ``on_relist_wanted``/``follow_beats``), and owns the tasks: the
dispatcher that fetches while slots are free and the processors that run what it fetched
(``dispatch.py``), the poller, the cron ticker, the wake-up listener, orphan recovery and
reconcile (``recovery.run_upkeep``), fencing, the loop-lag probe and the counters'
flusher (``stats_flush.py``); plus the heartbeat on its own thread. The first beat is
written before the first fetch.

Shutdown, in Sidekiq's phases (quiet, stop, hard stop, hand-over, retire), is
``shutdown.py``'s; ``stop()`` and ``hard_stop()`` here are its.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from cogworker_async.errors import why
from cogworker_async.jobs.definition import JobDefinition
from cogworker_async.jobs.periodic import Periodic
from cogworker_async.limits.limiter import LimitSpec
from cogworker_async.middleware import ServerMiddleware
from cogworker_async.observe.run_metrics import Tally
from cogworker_async.redis import limits
from cogworker_async.redis.beats import BeatWriter
from cogworker_async.redis.connection import SOCKET_TIMEOUT
from cogworker_async.redis.errors import (
    AuthenticationError,
    ClusterUnreachable,
    ConnectionLost,
    Unavailable,
)
from cogworker_async.redis.queues import NOTES_WAKE
from cogworker_async.redis.store import StatsFlush, Store
from cogworker_async.settings import Settings, unserved_limits
from cogworker_async.version import __version__
from cogworker_async.worker.canceller import Canceller
from cogworker_async.worker.cron import CronTicker, periodic_job
from cogworker_async.worker.dispatch import Dispatcher
from cogworker_async.worker.execute import Counters
from cogworker_async.worker.fencing import Fence
from cogworker_async.worker.fetch import BasicFetch, Fetcher, ReliableFetch
from cogworker_async.worker.heartbeat import LAG_PROBE_INTERVAL, Heartbeat, LoopLag
from cogworker_async.worker.hooks import HookRunner, Hooks
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.lifespan import Lifespan, entered
from cogworker_async.worker.notes_relay import NotesRelay
from cogworker_async.worker.observers import Extras, Observers, Vitals
from cogworker_async.worker.poller import Poller
from cogworker_async.worker.processor import Processor
from cogworker_async.worker.reconcile import Reconciler
from cogworker_async.worker.recovery import Recovery, run_upkeep
from cogworker_async.worker.settlement import Settler
from cogworker_async.worker.shutdown import Shutdown
from cogworker_async.worker.stats_flush import StatsFlusher
from cogworker_async.worker.streak import Streak
from cogworker_async.workflows.batch import OWNER as BATCH_OWNER

log = logging.getLogger(__name__)

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
        lifespan: Lifespan | None = None,
        declared_queues: Sequence[str] = (),
        extras: Extras,
    ) -> None:
        self.settings = settings
        self.lifespan = lifespan
        """``@jobs.lifespan``: entered before anything else, exited after everything."""
        self.outbox = extras.relay(settings, store, registry.keys())
        """The outbox relay (``App(outbox=...)``), None without one."""
        self.limiters = dict(limiters or {})
        """The App's limiters, registered at start (``_register_limiters``)."""
        self.store = store
        self.url = url
        """Where it beats: its jobs' blocks on batches there name it (``batch.OWNER``)."""
        self.identity = settings.identity or new_identity()
        reliable = settings.fetch == "reliable"
        # Reliable fetch may hold ``prefetch`` fetched jobs beyond the running ones (safe:
        # they are on this process's in-progress list), so a processor need not wait a
        # round trip for its next job — at the price of those jobs waiting here while
        # another process may be idle. Off by default.
        self.ledger = Ledger(settings.concurrency + (settings.prefetch if reliable else 0),
                             settings.concurrency)
        self.counters = Counters()
        self.tally = Tally()
        self.streaks = LoopStreaks()
        self.stats = StatsFlusher(store, self.identity, self.counters, self.tally,
                                  self.streaks.stats)
        self.hooks = HookRunner(hooks) if hooks else None
        self.metrics = extras.metrics(settings, self.vitals, registry.keys())
        # Known without a warning at start: the queues its jobs use and those the App
        # declares (``App(queues=...)``, before a ``--queue`` override replaced them).
        self._known_queues = {"default", *declared_queues,
                              *(definition.options.queue for definition in registry.values())}
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
        self.notes = NotesRelay(store, registry, settings.queue_names,
                                settings.max_payload_bytes, settings.poll_interval,
                                identity=self.identity,
                                judge_after=settings.orphan_threshold) if settings.tracked else None
        """The notes relay (``notes_relay.py``): members' and parents' ends, callbacks due;
        its own task."""
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
        self.ledger.follow_beats(lambda: self.heartbeat.beats_started)
        # No judging others dead in a queue's slot until our own beats there have
        # succeeded for orphan_threshold (see Recovery.recover_orphans): after a Redis
        # outage (or a shard's) every stamp there is stale.
        threshold = settings.orphan_threshold
        self.recovery = Recovery(store, settings, self.identity, may_judge=lambda queue: (
            self.heartbeat.steady_in(queue, threshold)), observers=self.observers)
        self.reconciler = Reconciler(store, self.settler, self.identity,
                                     settings.queue_names, self.ledger)
        self.shutdown = Shutdown(settings, self.ledger, identity=self.identity, store=store,
                                 reliable=reliable, settler=self.settler,
                                 reconciler=self.reconciler, relist=self.fence.relist,
                                 heartbeat=self.heartbeat, stats=self.stats)
        self.dispatcher = Dispatcher(settings, self.ledger, self.fetcher, self.settler,
                                     self.processor, self.shutdown,
                                     fetch_streak=self.streaks.fetch,
                                     idle_streak=self.streaks.idle_wait)
        self._upkeep: TaskGroup | None = None

    # -- the lifecycle, as hosts see it (``app.Worker``); the phases are ``shutdown.py``'s

    @property
    def stopping(self) -> bool:
        return self.shutdown.stopping

    @property
    def stopped_hard(self) -> bool:
        return self.shutdown.hard

    @property
    def budget_spent(self) -> bool:
        """It stopped because it had fetched ``max_jobs`` jobs (``run`` exits 4 under a
        supervisor, which then starts a fresh process)."""
        return self.shutdown.budget_spent

    async def wait_stopped(self) -> None:
        """Return once ``run`` has finished (after a stop and the hand-over)."""
        await self.shutdown.wait_finished()

    def stop(self) -> None:
        """Quiet: fetch nothing more; running jobs get ``shutdown_timeout`` to finish."""
        self.shutdown.stop()

    def hard_stop(self) -> None:
        """Stop now: running jobs are cancelled (and given back) without waiting."""
        self.shutdown.hard_stop()

    # -- the stats flush's state, as tests/worker/test_run_metrics_flush.py reads it ----

    @property
    def _flushes(self) -> int:
        return self.stats.flushes

    @_flushes.setter
    def _flushes(self, number: int) -> None:
        self.stats.flushes = number

    @property
    def _unconfirmed(self) -> StatsFlush | None:
        return self.stats.unconfirmed

    @_unconfirmed.setter
    def _unconfirmed(self, flush: StatsFlush | None) -> None:
        self.stats.unconfirmed = flush

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
        this process is registered anywhere. The lifespan (``lifespan.py``) is entered
        before all of it — a lifespan that raises stops the worker before it took a job —
        and exited once the last job has settled and the process has left."""
        async with entered(self.lifespan):
            if self.metrics is None:
                await self._work(task_status=task_status)
                return
            async with anyio.create_task_group() as metrics:
                await metrics.start(self.metrics.serve)
                try:
                    await self._work(task_status=task_status)
                finally:
                    metrics.cancel_scope.cancel()

    async def _warn_of_unknown_queues(self) -> None:
        """Say so, once at start, of each served queue that no job of the App uses, that
        the App does not declare, and on which nothing was ever enqueued: ``--queue
        emials`` would otherwise wait on an empty queue for good, in silence. Served
        anyway (a queue may be new). Never of ``App(queues=...)``'s own: the docs' first
        example declares "critical" before any job uses it."""
        # Not the settings' default queue: with ``--queue emials`` alone, that is it.
        unknown = [name for name in self.settings.queue_names
                   if name not in self._known_queues]
        if not unknown:
            return
        registered = set(await self.store.queue_names())
        for name in unknown:
            if name not in registered:
                log.warning("queue %r: no job of this App uses it and nothing was ever "
                            "enqueued on it (a typo?); served anyway", name)

    async def _work(self, *, task_status: TaskStatus[None]) -> None:
        reliable = self.fetcher.reliable
        await self.store.check_server(reliable=reliable)
        # Served queues are registered (the dashboard, the poller and recovery find each
        # queue's slot through the registry) before anything is fetched from them.
        await self._warn_of_unknown_queues()  # before registering makes them known
        await self.store.register_queues(self.settings.queue_names, required=False)
        await self._register_limiters()
        # The first beat before the first fetch: a job must never sit on the list of a
        # process that recovery could not yet see as alive.
        await self._first_beat()
        self.heartbeat.start()
        log.info("worker %s started: queues %s, concurrency %d, %s fetch", self.identity,
                 self.settings.queue_names, self.settings.concurrency,
                 "reliable" if reliable else "basic (running jobs are lost on a crash)")
        for name, which in unserved_limits(self.settings):
            log.warning("%s names queue %r, which this worker does not serve (queues %s): "
                        "a typo? Its limit does nothing here", which, name,
                        self.settings.queue_names)
        # Its jobs' batch blocks name it (batch_reaper.py), only while it is registered:
        # reset before the lifespan's exit, whose blocks hold on a lease (the process
        # has retired by then, and would be judged gone).
        owner = BATCH_OWNER.set((self.url, self.settings.namespace, self.identity))
        try:
            async with anyio.create_task_group() as upkeep:
                self._upkeep = upkeep
                if reliable:
                    await upkeep.start(self._listen_for_wake_ups)
                    upkeep.start_soon(run_upkeep, self.recovery, self.reconciler,
                                      self.settings, self.identity, self.processor.runner)
                upkeep.start_soon(self.poller.run)
                if self.notes is not None:
                    upkeep.start_soon(self.notes.run)
                upkeep.start_soon(self.cron.run)
                if self.outbox is not None:
                    upkeep.start_soon(self.outbox.run)
                upkeep.start_soon(self.stats.run)
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
                        jobs.start_soon(self.dispatcher.processor_loop)
                    task_status.started()
                    await self.dispatcher.run(jobs)
                    await self.shutdown.drain_jobs()
                    jobs.cancel_scope.cancel()
                if self.hooks is not None:
                    await self.shutdown.drain_hooks(self.hooks)
                upkeep.cancel_scope.cancel()
        finally:
            BATCH_OWNER.reset(owner)
            self._upkeep = None
            await self.shutdown.leave()
            log.info("worker %s stopped", self.identity)

    async def _register_limiters(self) -> None:
        """List the App's limiters where the dashboard and the CLI find them, and free
        the slots an earlier process of this identity held — before the first job,
        while this process holds none. Best effort: a limiter works unlisted."""
        try:
            await limits.register(self.store, self.limiters, self.identity)
        except Unavailable as exc:
            log.warning("couldn't register the limiters: %s", why(exc))

    async def _listen_for_wake_ups(self, *, task_status: TaskStatus[None]) -> None:
        """Each enqueue publishes a wake-up: an idle worker fetches within a round trip.
        Each note of a served queue (a batch member's or a watched parent's end) wakes
        the notes relay, so a hand-off does not wait for its poll."""
        started = False
        streak = self.streaks.wake_ups
        relay, served = self.notes, set(self.settings.queue_names)
        while True:
            try:
                async with self.store.wake_ups() as messages:
                    streak.succeeded()
                    if not started:
                        started = True
                        task_status.started()
                    self.ledger.slots.nudge()
                    async for message in messages:
                        if not message.startswith(NOTES_WAKE):
                            self.ledger.slots.nudge()
                        elif relay is not None and (queue := message[len(NOTES_WAKE):]) in served:
                            relay.wake(queue)
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

    def vitals(self) -> Vitals:
        """This process's gauges, right now (safe from a metrics server's thread)."""
        backlog = self.outbox.backlog if self.outbox is not None else None
        return Vitals(busy=self.ledger.busy, concurrency=self.settings.concurrency,
                      pending=len(self.ledger.pending), loop_lag=self.lag.latest,
                      outbox_rows=backlog.rows if backlog else None,
                      outbox_lag=backlog.lag if backlog else None)
