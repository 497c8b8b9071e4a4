"""The system-wide gauges: what is in Redis, the same whichever process reads it.

Served by one reader, never by every worker (N workers reporting the same queue size
would be N series of one fact, and ``sum()`` over them N times too much): the
dashboard's ``/metrics`` (``render``) and the ``cogworker-async metrics`` exporter
(``SystemCollector``, ``exporter.py``). Read through the admin model (``Inspector``),
as the dashboard reads them, at each scrape:

- ``cogworker_queue_size{queue}``: jobs waiting on each registered queue.
- ``cogworker_queue_latency_seconds{queue}``: how long its oldest job has waited (0 for
  an empty queue).
- ``cogworker_queue_paused{queue}``: 1 while the queue is paused (``App.pause``), else 0.
- ``cogworker_jobs_waiting_for_parents{queue}``: the queue's jobs waiting for their
  parents (``options(after=[...])``): not on its list yet, so not in its size.
- ``cogworker_queue_demand{queue}``: the work the queue has now — waiting, plus its
  scheduled and retry jobs due (read, never promoted: they count with no worker
  running), plus running, plus, for an App with an outbox, its rows committed and not
  yet relayed (they count with no worker running, whose relay would push them) — what an
  autoscaler scales on (KEDA, an HPA: docs/guides/deploying.md).
- ``cogworker_outbox_rows{queue}``: those outbox rows (an App with an outbox only).
- ``cogworker_scheduled_size``, ``cogworker_retry_size``, ``cogworker_dead_size``: the
  sets, summed over queues.
- ``cogworker_processes``: worker processes alive (beating).
- ``cogworker_up``: 1 when this scrape read Redis; 0 when Redis could not be read within
  ``SCRAPE_TIMEOUT`` (down, refusing, too slow) — then none of the gauges above is given.

Why ``cogworker_up 0`` rather than a failed scrape: the exporter convention
(``redis_exporter``'s ``redis_up``, ``mysqld_exporter``'s ``mysql_up``). The scrape
itself succeeds, so Prometheus' own ``up`` says the exporter is running, and
``cogworker_up == 0`` says Redis is not answering it: two different alerts. The bound
keeps a hung Redis from hanging the scrape past Prometheus' own timeout (10 s by
default), which would leave no answer at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import anyio
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cogworker_async.admin.api import MAX_QUEUES_READ
from cogworker_async.admin.records import QueueInfo
from cogworker_async.redis.errors import ClusterUnreachable, ConnectionLost, RedisError
from cogworker_async.worker.streak import Streak

if TYPE_CHECKING:
    from cogworker_async.admin.api import Inspector

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT: Final = 5.0
"""Seconds one read of Redis may take: past it, ``cogworker_up 0`` (half of
Prometheus' default scrape timeout: the answer arrives before it gives up)."""
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
"""The classic text exposition format, what ``generate_latest`` writes and every
Prometheus version reads (our names and labels need none of the newer escaping)."""
READING: Final = "reading Redis for the metrics"
"""The name of the streak that logs an outage once (and its end)."""
OUTBOX_TIMEOUT: Final = 2.0
"""Seconds the read of the outbox's rows may take (within ``SCRAPE_TIMEOUT``)."""
OUTBOX_STREAK: Final = Streak("reading the outbox for the metrics")


@dataclass(frozen=True, slots=True)
class SystemGauges:
    """One read of the system-wide figures."""

    queues: tuple[QueueInfo, ...]
    scheduled: int
    retries: int
    dead: int
    processes: int
    """Processes alive (beating)."""
    left_out: int = 0
    """Queues past ``MAX_QUEUES_READ`` with no series (nor part of the set sizes)."""
    batches_open: int = 0
    """Batches not ended (``jobs.batch``)."""
    outbox: tuple[tuple[str, int], ...] | None = None
    """Outbox rows a relay would push, by queue (None: no outbox, or not read)."""


async def read(inspector: Inspector) -> SystemGauges:
    """The figures, as the dashboard reads them (each read bounded by the admin model:
    heads of queues, set cardinalities, one entry per process), for at most
    ``MAX_QUEUES_READ`` queues (the App's own first): a scrape of tens of thousands of
    queues took longer than its timeout, and lost ``cogworker_up`` with the rest."""
    names, count = await inspector.queues.bounded()
    found = await inspector.processes.all()  # read once: the queues' unserved mark too
    queues = await inspector.queues.infos(names, processes=found)
    scheduled, retries, dead = await inspector.admin().set_sizes(
        ["schedule", "retry", "dead"], names)
    processes = sum(1 for process in found if process.alive)
    batches_open = await inspector.app._store().batches.open_count()
    return SystemGauges(tuple(queues), scheduled, retries, dead, processes,
                        count - len(names), batches_open, await _outbox(inspector))


async def _outbox(inspector: Inspector) -> tuple[tuple[str, int], ...] | None:
    """The App's outbox rows by queue (``outbox/relay.py``'s ``demand``), or None: no outbox, or
    its database not read within ``OUTBOX_TIMEOUT`` (logged once per outage: the Redis
    figures are given all the same)."""
    app = inspector.app
    if app.settings.outbox is None:
        return None
    from cogworker_async.outbox.relay import demand

    try:
        with anyio.fail_after(OUTBOX_TIMEOUT):
            found = await demand(app.settings.outbox, app.settings.namespace,
                                 app.registry.keys())
    except Exception as exc:  # the database away: Redis' figures still count
        OUTBOX_STREAK.failed(exc)
        return None
    OUTBOX_STREAK.succeeded()
    return tuple(sorted(found.items()))


async def read_bounded(inspector: Inspector, streak: Streak) -> SystemGauges | None:
    """``read`` within ``SCRAPE_TIMEOUT``; None if Redis could not be read (logged once
    per outage through ``streak``). Any other error is a bug: logged with its
    traceback, and still None — a scrape must answer."""
    try:
        with anyio.fail_after(SCRAPE_TIMEOUT):
            gauges = await read(inspector)
    except (RedisError, ClusterUnreachable, *ConnectionLost) as exc:  # + fail_after's
        streak.failed(exc)
        return None
    except Exception as exc:
        streak.failed(exc, trace=True)
        return None
    streak.succeeded()
    return gauges


def families(gauges: SystemGauges | None) -> list[Metric]:
    """The metric families of one read (None: Redis could not be read)."""
    up = GaugeMetricFamily("cogworker_up", "1 if Redis was read for this scrape, 0 if "
                           "not (then no other cogworker gauge is given).",
                           value=0 if gauges is None else 1)
    if gauges is None:
        return [up]
    size = GaugeMetricFamily("cogworker_queue_size", "Jobs waiting on the queue.",
                             labels=["queue"])
    latency = GaugeMetricFamily("cogworker_queue_latency_seconds",
                                "Seconds the queue's oldest job has waited.", labels=["queue"])
    paused = GaugeMetricFamily("cogworker_queue_paused",
                               "1 while the queue is paused: no worker starts its jobs.",
                               labels=["queue"])
    waiting = GaugeMetricFamily("cogworker_jobs_waiting_for_parents",
                                "Jobs of the queue waiting for their parents (after=).",
                                labels=["queue"])
    demand = GaugeMetricFamily("cogworker_queue_demand",
                               "Jobs of the queue to run now: waiting, due (scheduled and "
                               "retries), and running. Scale workers on it.",
                               labels=["queue"])
    outbox = dict(gauges.outbox or ())
    for queue in gauges.queues:
        size.add_metric([queue.name], queue.size)
        latency.add_metric([queue.name], queue.latency)
        paused.add_metric([queue.name], 1 if queue.paused else 0)
        waiting.add_metric([queue.name], queue.waiting_for_parents)
        demand.add_metric([queue.name], queue.demand + outbox.get(queue.name, 0))
    listed = {queue.name for queue in gauges.queues}
    for name, rows in outbox.items():  # a queue never pushed to yet: its rows alone
        if name not in listed:
            demand.add_metric([name], rows)
    return [
        up, size, latency, paused, waiting, demand, *_outbox_rows(gauges),
        GaugeMetricFamily("cogworker_scheduled_size", "Jobs scheduled for later.",
                          value=gauges.scheduled),
        GaugeMetricFamily("cogworker_retry_size", "Failed jobs waiting for their retry.",
                          value=gauges.retries),
        GaugeMetricFamily("cogworker_dead_size", "Jobs in the dead set.",
                          value=gauges.dead),
        GaugeMetricFamily("cogworker_processes", "Worker processes alive.",
                          value=gauges.processes),
        GaugeMetricFamily("cogworker_batches_open",
                          "Batches not ended: open, or sealed with members pending.",
                          value=gauges.batches_open),
        GaugeMetricFamily("cogworker_queues_not_exported",
                          f"Queues past the first {MAX_QUEUES_READ} (the app's own first, "
                          "then by name) that have no series and are not in the set sizes.",
                          value=gauges.left_out),
    ]


def _outbox_rows(gauges: SystemGauges) -> list[Metric]:
    if gauges.outbox is None:
        return []
    rows = GaugeMetricFamily("cogworker_outbox_rows", "Outbox rows committed and not yet "
                             "relayed (in the queue's demand).", labels=["queue"])
    for name, count in gauges.outbox:
        rows.add_metric([name], count)
    return [rows]


class _Families(Collector):
    """Families already read, for ``generate_latest``."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics


async def render(inspector: Inspector, *, streak: Streak | None = None) -> tuple[bytes, str]:
    """The system-wide gauges as a scrape's body and its content type (the dashboard's
    ``/metrics``). Never raises for Redis: ``cogworker_up 0`` says it was not read.
    ``streak``: one kept across scrapes logs an outage once (else each failed scrape
    logs a warning)."""
    gauges = await read_bounded(inspector, streak or Streak(READING))
    return generate_latest(_Families(families(gauges))), CONTENT_TYPE


class SystemCollector(Collector):
    """The system-wide gauges for a ``CollectorRegistry``, read at each scrape by
    ``read_now`` (blocking: the exporter's server threads call into its event loop)."""

    def __init__(self, read_now: Callable[[], SystemGauges | None]) -> None:
        self._read_now = read_now

    def describe(self) -> Iterable[Metric]:
        return []  # registered without a read of Redis

    def collect(self) -> Iterable[Metric]:
        return families(self._read_now())
