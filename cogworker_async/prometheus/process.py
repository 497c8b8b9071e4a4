"""A worker process's Prometheus metrics: what it ran, how it went, how busy it is.

``WorkerMetrics`` is an observer (``worker/observers.py``): the processor hands it a
``RunReport`` for every run, recovery tells it how many jobs it took back from a dead
process. It is also the server that shows them (``serve``, started by the Manager when
``metrics_port`` is set).

Series (the job and queue labels are the registered job name and the queue it ran from):

- ``cogworker_jobs_total{job,queue,outcome}``: runs by outcome. The outcome values are
  **exclusive**, one per run: ``succeeded``, ``retried`` (failed, will run again),
  ``dead`` (failed, no retries left, or could never run) and ``discarded`` (failed with
  one of its ``discard_on`` exceptions). Their sum is every run, and failures are
  ``outcome!="succeeded"``; a separate ``failed`` value would count each failed run
  twice and make ``sum by (job)`` wrong, which is why there is none (the Prometheus
  convention: the values of one label partition the counter).
- ``cogworker_jobs_recovered_total{queue}``: jobs taken back from dead processes.
- ``cogworker_job_duration_seconds{job,queue}``: run time (fetch to outcome), histogram.
- ``cogworker_job_wait_seconds{job,queue}``: enqueued (last put on its queue) to started,
  histogram; runs whose payload has no enqueue time are not observed.
- ``cogworker_busy_slots``, ``cogworker_concurrency``, ``cogworker_pending_settlements``,
  ``cogworker_loop_lag_seconds``: read from ``Manager.vitals`` at each scrape.

The hot path (``finished``, on the event loop, for every run) only adds to plain
numbers: one dict lookup for the (job, queue) ``SeriesCounts``, an increment, and a bucket
found by bisection for each histogram. No lock, no metric object: a scrape (in the
server's thread) reads the tallies and builds the families then. Why not
``prometheus_client``'s own counters and histograms (a lock per increment, a linear
bucket search): measured, they cost 3.8 µs a run against 0.5 µs for these tallies, when
a no-op run costs the worker about 55 µs of CPU; with them, a first (short) run of
``benchmarks/metrics_cost.py`` had metrics on at 0.85 × the no-op throughput of off,
past the issue's 10 %; with the tallies, a full run has 0.98 ×.

Why reading from another thread is sound: each number is one Python object, replaced
whole under the GIL, and only ever grows; the scrape copies the dict of tallies before
walking it (a new (job, queue) may be added meanwhile). A histogram's count is its
``+Inf`` bucket, so count and buckets always agree; its sum may be one run ahead or
behind of them for one scrape, which no rate computed over it can see.

The tally of a (job, queue) is made on its first run with every outcome at 0, so that
each counter starts at 0 (``rate()`` and ``increase()`` see the first failure). Each
``WorkerMetrics`` has its own ``CollectorRegistry``, never the global one: several
workers may run in one process (tests, an app embedding two), and the global registry
refuses a second metric of the same name.

This module imports nothing of the worker's: the App's ``wiring.py`` imports it (only
when ``metrics_port`` is set) and hands it to the worker, so it names what it reads of a
report and of the vitals as protocols (``Report``, ``Gauges``), which
``worker/observers.py``'s ``RunReport`` and ``Vitals`` are, and takes the list of
outcomes from the worker (``outcomes``) instead of importing it.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Final, Protocol

import anyio
from anyio.abc import TaskStatus
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from cogworker_async.prometheus.server import listen
from cogworker_async.settings import Settings

log = logging.getLogger(__name__)

DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                           30.0, 60.0, 300.0, 900.0, 3600.0)
"""Upper bounds (seconds) of the run-time histogram: a few ms (a no-op, a cache write)
to an hour (a report, a backfill); finer below a second, where most jobs are."""
WAIT_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                       30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)
"""Upper bounds (seconds) of the enqueue-to-start histogram: an idle worker picks a job
up in milliseconds; a backlog makes jobs wait minutes to hours (to 4 h)."""
MAX_SERIES: Final = 1000
"""(job, queue) pairs of unregistered job names given series of their own; later ones
are counted under ``OTHER``. Job names come from payloads: a producer enqueuing under
ever new names (unknown jobs, filed in dead) must not grow the process, and every
scrape, without bound. Registered names are not counted against it (their number is
the app's): they always have their series, or a flood of invented names sent before a
registered job first ran would leave it as ``OTHER`` until a restart."""
OTHER: Final = "(other)"
"""The job label of runs of unregistered names past ``MAX_SERIES`` (job, queue) pairs."""


class Report(Protocol):
    """What the tallies read of a finished run (``worker.observers.RunReport``)."""

    @property
    def name(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def duration(self) -> float: ...
    @property
    def wait(self) -> float | None: ...


class Gauges(Protocol):
    """What a scrape reads of the process at one moment (``worker.observers.Vitals``)."""

    @property
    def busy(self) -> int: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def loop_lag(self) -> float: ...
    @property
    def outbox_rows(self) -> int | None: ...
    @property
    def outbox_lag(self) -> float | None: ...


class SeriesCounts:
    """One (job, queue)'s counts. Written on the event loop only; read by scrapes."""

    __slots__ = ("duration", "duration_sum", "outcomes", "wait", "wait_sum")

    def __init__(self, outcomes: Collection[str] = ()) -> None:
        self.outcomes: dict[str, int] = dict.fromkeys(outcomes, 0)
        """Runs per outcome: each of ``outcomes`` from 0, any other from its first run."""
        self.duration = [0] * (len(DURATION_BUCKETS) + 1)
        """Runs per bucket (not cumulative); the last is past every bound (+Inf)."""
        self.duration_sum = 0.0
        self.wait = [0] * (len(WAIT_BUCKETS) + 1)
        self.wait_sum = 0.0


def le_labels(bounds: Sequence[float]) -> tuple[str, ...]:
    """The ``le`` label of each bucket, as Prometheus' clients write them, ``+Inf`` last."""
    return tuple(floatToGoString(bound)  # type: ignore[no-untyped-call]  # (untyped lib)
                 for bound in (*bounds, float("inf")))


DURATION_LE: Final = le_labels(DURATION_BUCKETS)
WAIT_LE: Final = le_labels(WAIT_BUCKETS)


def cumulative(le: Sequence[str], counts: Sequence[int]) -> list[tuple[str, float]]:
    """Per-bucket counts as Prometheus' cumulative buckets (``le`` from ``le_labels``)."""
    buckets, total = [], 0
    for label, count in zip(le, counts, strict=True):
        total += count
        buckets.append((label, float(total)))
    return buckets


def run_families(tallies: dict[tuple[str, str], SeriesCounts], recovered: dict[str, int]
                 ) -> list[Metric]:
    """The counters and histograms of the runs so far."""
    runs = CounterMetricFamily("cogworker_jobs", "Runs, by outcome (one per run: failures "
                               "are retried + dead + discarded).",
                               labels=["job", "queue", "outcome"])
    duration = HistogramMetricFamily("cogworker_job_duration_seconds",
                                     "Run time, fetch to outcome, in seconds.",
                                     labels=["job", "queue"])
    wait = HistogramMetricFamily("cogworker_job_wait_seconds",
                                 "Enqueued to started, in seconds.", labels=["job", "queue"])
    for (job, queue), tally in list(tallies.items()):  # a copy: the loop may add one
        for outcome, count in tally.outcomes.items():
            runs.add_metric([job, queue, outcome], count)
        duration.add_metric([job, queue], cumulative(DURATION_LE, tally.duration),
                            tally.duration_sum)
        wait.add_metric([job, queue], cumulative(WAIT_LE, tally.wait), tally.wait_sum)
    taken_back = CounterMetricFamily("cogworker_jobs_recovered",
                                     "Jobs taken back from dead processes.", labels=["queue"])
    for queue, count in list(recovered.items()):
        taken_back.add_metric([queue], count)
    return [runs, taken_back, duration, wait]


def vitals_families(now: Gauges) -> list[Metric]:
    """The process gauges at one moment."""
    return [
        GaugeMetricFamily("cogworker_busy_slots", "Jobs whose run is in progress.",
                          value=now.busy),
        GaugeMetricFamily("cogworker_concurrency", "Jobs this process runs at once at most.",
                          value=now.concurrency),
        GaugeMetricFamily("cogworker_pending_settlements",
                          "Outcomes decided but not yet settled in Redis (it is away).",
                          value=now.pending),
        GaugeMetricFamily("cogworker_loop_lag_seconds",
                          "How late the event loop last woke up, in seconds.",
                          value=now.loop_lag),
        *([] if now.outbox_rows is None else [
            GaugeMetricFamily("cogworker_outbox_backlog",
                              "Outbox rows committed and not yet relayed to Redis.",
                              value=now.outbox_rows),
            GaugeMetricFamily("cogworker_outbox_lag_seconds",
                              "Seconds the oldest outbox row has waited for the relay.",
                              value=now.outbox_lag or 0.0)]),
    ]


class _Exposition(Collector):
    """What a scrape of one worker shows (called in the server's thread)."""

    def __init__(self, metrics: WorkerMetrics, vitals: Callable[[], Gauges]) -> None:
        self._metrics = metrics
        self._vitals = vitals

    def describe(self) -> Iterable[Metric]:
        return []  # registered without a read

    def collect(self) -> Iterable[Metric]:
        metrics = self._metrics
        return [*run_families(metrics.tallies, metrics.recovered_jobs),
                *vitals_families(self._vitals())]


class WorkerMetrics:
    """One worker process's metrics: an observer of its runs, and their server."""

    def __init__(self, settings: Settings, vitals: Callable[[], Gauges],
                 registered: Collection[str] = (), outcomes: Collection[str] = ()) -> None:
        if settings.metrics_port is None:
            raise ValueError("WorkerMetrics needs settings.metrics_port")
        self.host = settings.metrics_host
        self.port = settings.metrics_port
        self.tallies: dict[tuple[str, str], SeriesCounts] = {}
        self.registered = frozenset(registered)
        """The app's job names: never counted against ``MAX_SERIES``."""
        self.outcomes = tuple(outcomes)
        """Every outcome a run may have (``observers.OUTCOMES``, given by the worker):
        each (job, queue)'s counter of each starts at 0."""
        self._strangers = 0
        """Tallies of names not in ``registered`` (``OTHER``'s own included)."""
        self.recovered_jobs: dict[str, int] = dict.fromkeys(settings.queue_names, 0)
        """Jobs taken back from dead processes, per queue (each served queue from 0)."""
        self.registry = CollectorRegistry()
        self.registry.register(_Exposition(self, vitals))

    # -- observer (on the event loop) ---------------------------------------------------

    def finished(self, report: Report) -> None:
        tally = self.tallies.get((report.name, report.queue))
        if tally is None:
            tally = self._add(report.name, report.queue)
        try:
            tally.outcomes[report.outcome] += 1
        except KeyError:  # an outcome not in ``outcomes`` (none given): from its first run
            tally.outcomes[report.outcome] = 1
        duration = report.duration
        tally.duration[bisect_left(DURATION_BUCKETS, duration)] += 1
        tally.duration_sum += duration
        wait = report.wait
        if wait is not None:
            tally.wait[bisect_left(WAIT_BUCKETS, wait)] += 1
            tally.wait_sum += wait

    def recovered(self, queue: str, count: int) -> None:
        self.recovered_jobs[queue] = self.recovered_jobs.get(queue, 0) + count

    def _add(self, name: str, queue: str) -> SeriesCounts:
        """The tally of a (job, queue) seen for the first time, or ``OTHER``'s past
        ``MAX_SERIES`` unregistered ones. (Past the bound, a new name is not remembered —
        that would grow without bound too: each of its runs costs one more lookup.)"""
        stranger = name not in self.registered
        if stranger and self._strangers >= MAX_SERIES:
            if (OTHER, queue) not in self.tallies:
                log.warning("more than %d (job, queue) pairs of unregistered jobs ran: "
                            "runs of job %r and later new ones are counted as job=%r",
                            MAX_SERIES, name, OTHER)
            name = OTHER
        tally = self.tallies.get((name, queue))
        if tally is None:
            tally = self.tallies[(name, queue)] = SeriesCounts(self.outcomes)
            self._strangers += stranger
        return tally

    # -- server -------------------------------------------------------------------------

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                    ) -> None:
        """Listen on ``metrics_host:metrics_port`` (a port in use: ``ConfigurationError``,
        and the worker does not start), report started, serve until cancelled, close."""
        # Shielded: cancelled while binding, the server would be made and never closed.
        with anyio.CancelScope(shield=True):
            server = await anyio.to_thread.run_sync(listen, self.host, self.port,
                                                    self.registry)
        try:
            log.info("serving Prometheus metrics at %s", server.url)
            task_status.started()
            await anyio.sleep_forever()
        finally:
            await server.aclose()
