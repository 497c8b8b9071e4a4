"""Every knob of an App, in one frozen dataclass, validated once.

``App(...)`` builds one of these; ``jobs.worker(concurrency=5)`` derives a new one with
``dataclasses.replace``. A worker never sees its settings change while it runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from cogworker_async.jobs.names import check_queue_name as check_queue_name  # re-exported
from cogworker_async.jobs.priority import MAX_PRIORITY_AGING, PRIORITY_AGING
from cogworker_async.jobs.retries import DEFAULT_RETRIES as DEFAULT_RETRIES  # re-exported

MAX_PAYLOAD_BYTES: Final = 512 * 1024
"""Default largest encoded job: enqueue refuses bigger, the worker files bigger in dead."""

DEAD_MAX_JOBS: Final = 10_000
"""Default bound on the dead set (Sidekiq's): filing one more drops the oldest."""
DEAD_MAX_AGE: Final = 180 * 24 * 3600.0
"""Default age (seconds) after which a dead job is dropped, at the next filing (Sidekiq's)."""

KEEP_STATUS: Final = 600.0
"""Default ``keep_status``: seconds a finished job's status record is kept."""

MAX_CONCURRENCY: Final = 10_000
"""Largest ``concurrency`` (and ``prefetch``, ``sync_threads``): each slot is a task (or
thread) made at start, so a typo like 1000000000 would take the machine's memory."""
MAX_PAYLOAD_LIMIT: Final = 512 * 1024 * 1024
"""Largest ``max_payload_bytes``: Redis' own limit on one string (512 MiB)."""
MAX_DEAD_JOBS: Final = 10_000_000
"""Largest ``dead_max_jobs``: a bound meant to protect Redis' memory must be one."""

FetchMode = Literal["reliable", "basic"]

DurabilityMode = Literal["replica", "aof"]
TracingRemote = Literal["parent", "link"]

MAX_DURABILITY_TIMEOUT: Final = 60.0
"""Longest ``durability_timeout``: each enqueue and settle may wait this long."""
MAX_DURABILITY_REPLICAS: Final = 100

QueueSpec = str | tuple[str, int]

MAX_PORT: Final = 65535

MAX_JOBS: Final = 10**12
"""Largest ``max_jobs``."""

MAX_QUEUE_LIMIT: Final = 1_000_000
"""Largest value in ``queue_limits``."""

BEATS_PER_THRESHOLD: Final = 2
"""``orphan_threshold`` spans at least this many beats: one beat may be late (a busy
host, a slow Redis round trip: a beat gives up after up to one interval) without the
process being taken for dead."""


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    return float(value)


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    """A duration: finite (an infinite one would never end), and > 0 (or >= 0)."""
    seconds = _number(name, value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number of seconds {bound}, got {value!r}")


def _count(name: str, value: object, low: int, high: int) -> None:
    """A size: an int within [low, high] (the top bound keeps a typo from taking memory)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high:,}, got {value:,}")


@dataclass(frozen=True, slots=True)
class Settings:
    """Configuration of one App. Durations are in seconds."""

    redis_url: str | None = None
    """None: ``$COGWORKER_REDIS_URL``, else the embedded server."""
    namespace: str = "cogworker"
    """Prefix of every key, without braces: each key carries its own hash tag (a queue's
    slot, or the namespace's), on a single Redis and on Redis Cluster alike."""
    queues: Sequence[QueueSpec] = ("default",)
    """Fetch order: names in strict order, or ``(name, weight)`` pairs for weighted order."""
    concurrency: int = 10
    """Jobs run at once by one worker process."""
    heartbeat_interval: float = 5.0
    orphan_threshold: float = 20.0
    """No beat for this long: the process is dead and its jobs are recovered."""
    recovery_interval: float = 5.0
    max_orphanings: int = 3
    """Recovered from a dead process more often than this: dead, as ``ProcessDied``."""
    max_limit_reschedules: int = 20
    """Times a job refused by a limiter (``OverLimit``) is rescheduled without counting a
    failure or a retry; past it, a refusal fails the run like any error (Sidekiq
    Enterprise's default)."""
    shutdown_timeout: float = 25.0
    """How long running jobs get to finish after SIGTERM before they are cancelled."""
    poll_interval: float = 2.0
    """How often the poller moves due scheduled and retry jobs (jittered)."""
    idle_fetch_interval: float = 1.0
    """Idle workers are woken by each enqueue; this is the fallback poll for a missed wake-up."""
    retry_base_delay: float = 15.0
    """First retry delay; each further retry doubles it (with jitter)."""
    retry_max_delay: float = 24 * 3600.0
    """Cap on one retry delay."""
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    fetch: FetchMode = "reliable"
    """"basic" (BRPOP) loses the jobs that were running when a process crashes."""
    data_dir: str | None = None
    """Embedded server's data dir (default ``$COGWORKER_DATA_DIR`` or ``./.cogworker``)."""
    prefetch: int = 0
    """Fetched jobs held ready beyond the running ones (reliable fetch): faster for
    very short jobs; they wait in this process even while another one is idle."""
    sync_threads: int = 10
    """Threads for plain (non-async) job functions."""
    max_jobs: int | None = None
    """Jobs a worker fetches before it stops by itself, gracefully (``run --max-jobs``:
    its supervisor then starts a fresh process); None: no bound."""
    queue_limits: Mapping[str, int] = field(default_factory=dict)
    """Most jobs of a queue running at once across every worker process (``{"reports":
    2}``), decided by the fetch script from the processes' in-progress lists, so a crash
    frees its share when recovery takes its jobs back. Every process must agree; needs
    reliable fetch. Prefetched jobs count as running."""
    priority_aging: float | None = PRIORITY_AGING
    """Seconds of waiting worth one priority level (``options(priority=N)``): a job that
    has waited this long is served as one level higher, and so on, so under a flood of
    higher-priority work a low one still runs (docs/guides/who-runs-next.md states the
    bound). None: a higher priority always goes first. Every process should agree."""
    outbox: Any = None
    """Relay this outbox (an ``outbox.Outbox(engine)``) inside each worker process: the
    jobs written by ``outbox.enqueue`` in the application's transactions are pushed
    once they commit (``cogworker-async outbox-relay`` runs the relay alone)."""
    group_limits: Mapping[str, int] = field(default_factory=dict)
    """Most jobs of any one fair group (``options(group=...)``) of a queue running at
    once across every worker process (``{"reports": 2}``), counted by the fetch script
    from the in-progress lists as ``queue_limits`` is; 1 runs each group's jobs one at a
    time, in order. Every process must agree; needs reliable fetch."""
    dead_max_jobs: int = DEAD_MAX_JOBS
    """Most jobs kept in dead: filing one more drops the oldest."""
    dead_max_age: float = DEAD_MAX_AGE
    """Dead jobs older than this (seconds) are dropped when the next one is filed."""
    durability: DurabilityMode | None = None
    """What each enqueue and settle waits for before it counts as done: None (the
    default) nothing beyond the master; ``"replica"`` one replica has it (``WAIT``);
    ``"aof"`` the master's append-only file has it on disk (``WAITAOF``, Redis >= 7.2
    or Valkey). Not confirmed in ``durability_timeout``: the enqueue raises
    ``NotDurable``, a settle stays pending."""
    durability_timeout: float = 1.0
    durability_replicas: int = 1
    """Replicas that must confirm each write under ``durability="replica"`` (``WAIT
    n``). 1 survives the master's crash, not a partition that leaves it with one replica
    while another is promoted; the number of replicas survives that too, but then one
    replica away fails every enqueue (docs/guides/cluster-sentinel.md)."""
    keep_status: float = KEEP_STATUS
    """Seconds a finished job's status record (succeeded, dead, cancelled) is kept when
    the job keeps no result (``keep_result``): ``status(jid)`` answers that long after
    the end, then says ``unknown``. Every job has a record while it is alive; this
    bounds the memory of the ones that ended (docs/reference/keys.md); 0 keeps them a
    second."""
    track_jobs: bool = True
    """Keep a status record per job (``status``, ``result``, ``cancel``, progress,
    ``keep_result``, ``options(jid=...)``). False: none — each job costs Redis a key
    less (about 10 µs of its CPU per job, ``benchmarks/``), and those calls raise
    ``ConfigurationError``. Every process of an App must agree."""
    metrics_port: int | None = None
    """Serve this process's Prometheus metrics on ``http://metrics_host:metrics_port/metrics``
    (the ``metrics`` extra); None (the default): no server, no cost."""
    metrics_host: str = "127.0.0.1"
    """Where the metrics server listens: loopback unless you say otherwise."""
    tracing: bool | None = None
    """OpenTelemetry spans for enqueues and runs: None (the default) when
    ``opentelemetry-api`` is installed (the ``otel`` extra), True to require it, False
    for none."""
    tracing_baggage: bool = False
    """Carry the enqueuer's W3C baggage in payloads to the run. Off by default: baggage
    often holds what should not sit in Redis (session ids, e-mails), and whoever can
    write a payload chooses what reaches the job (docs/guides/observability.md, "Trust")."""
    tracing_remote: TracingRemote = "parent"
    """What a run's span makes of the enqueue's context from the payload: ``"parent"``
    (the run is in the enqueuer's trace; the worker's sampler decides whether it is
    recorded, never the payload's flag) or ``"link"`` (a trace of its own, linked to the
    enqueue: for producers this worker does not trust)."""
    identity: str | None = field(default=None)
    """This process's identity (default: host:pid:random)."""

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not self.namespace:
            raise ValueError("namespace must be a non-empty str")
        self._check_queues()
        self._check_numbers()
        if self.fetch not in ("reliable", "basic"):
            raise ValueError(f"fetch must be 'reliable' or 'basic', not {self.fetch!r}")
        self._check_queue_limits()
        if self.outbox is not None and not hasattr(self.outbox, "engine"):
            # (the Outbox class is the outbox extra's: not imported by the core)
            raise TypeError(f"outbox must be an outbox.Outbox(engine), not "
                            f"{type(self.outbox).__name__}")
        if self.durability not in (None, "replica", "aof"):
            raise ValueError("durability must be None, 'replica' or 'aof', "
                             f"not {self.durability!r}")

    def _check_queues(self) -> None:
        if isinstance(self.queues, str) or not self.queues:
            raise TypeError("queues must be a non-empty list of names or (name, weight) pairs")
        for spec in self.queues:
            name, weight = (spec, 1) if isinstance(spec, str) else spec
            check_queue_name(name)
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise ValueError(f"queue weight of {name!r} must be an int >= 1")

    def _check_queue_limits(self) -> None:
        for what, limits, each in (("queue_limits", self.queue_limits, "jobs of it"),
                                   ("group_limits", self.group_limits,
                                    "jobs of any one of its groups")):
            if not isinstance(limits, Mapping):
                raise TypeError(f"{what} must be a mapping of queue name to the most {each} "
                                f"running at once, not {type(limits).__name__}")
            for name, limit in limits.items():
                check_queue_name(name)
                _count(f"{what}[{name!r}]", limit, 1, MAX_QUEUE_LIMIT)
            if limits and self.fetch != "reliable":
                raise ValueError(f"{what} needs reliable fetch: a basic-fetch worker pops "
                                 "jobs outside the script that counts what runs")

    def _check_tracing(self) -> None:
        if self.tracing not in (None, True, False):
            raise TypeError(f"tracing must be None, True or False, not {self.tracing!r}")
        if not isinstance(self.tracing_baggage, bool):
            raise TypeError(f"tracing_baggage must be True or False, not "
                            f"{self.tracing_baggage!r}")
        if self.tracing_remote not in ("parent", "link"):
            raise ValueError(f"tracing_remote must be 'parent' or 'link', not "
                             f"{self.tracing_remote!r}")

    def _check_numbers(self) -> None:
        _count("concurrency", self.concurrency, 1, MAX_CONCURRENCY)
        _count("prefetch", self.prefetch, 0, MAX_CONCURRENCY)
        _count("sync_threads", self.sync_threads, 1, MAX_CONCURRENCY)
        _count("max_orphanings", self.max_orphanings, 0, 1_000_000)
        _count("max_limit_reschedules", self.max_limit_reschedules, 0, 1_000_000)
        if self.max_jobs is not None:
            _count("max_jobs", self.max_jobs, 1, MAX_JOBS)
        _count("max_payload_bytes", self.max_payload_bytes, 1, MAX_PAYLOAD_LIMIT)
        _count("dead_max_jobs", self.dead_max_jobs, 1, MAX_DEAD_JOBS)
        for name in ("heartbeat_interval", "orphan_threshold", "recovery_interval",
                     "poll_interval", "idle_fetch_interval", "retry_max_delay",
                     "dead_max_age"):
            _positive(name, getattr(self, name))
        _positive("shutdown_timeout", self.shutdown_timeout, allow_zero=True)
        _positive("retry_base_delay", self.retry_base_delay, allow_zero=True)
        _positive("keep_status", self.keep_status, allow_zero=True)
        _positive("durability_timeout", self.durability_timeout)
        _count("durability_replicas", self.durability_replicas, 1, MAX_DURABILITY_REPLICAS)
        if self.priority_aging is not None:
            _positive("priority_aging", self.priority_aging)
            if self.priority_aging > MAX_PRIORITY_AGING:
                raise ValueError(f"priority_aging must be at most {MAX_PRIORITY_AGING:,.0f} "
                                 f"seconds (None: no aging), got {self.priority_aging!r}")
        if self.metrics_port is not None:
            _count("metrics_port", self.metrics_port, 0, MAX_PORT)
        if not isinstance(self.metrics_host, str) or not self.metrics_host:
            raise TypeError("metrics_host must be a non-empty str (an address to listen on)")
        if not isinstance(self.track_jobs, bool):
            raise TypeError(f"track_jobs must be True or False, not {self.track_jobs!r}")
        self._check_tracing()
        if self.durability_timeout > MAX_DURABILITY_TIMEOUT:
            raise ValueError(f"durability_timeout must be at most {MAX_DURABILITY_TIMEOUT:g}"
                             f" seconds, got {self.durability_timeout!r}")
        if self.orphan_threshold < BEATS_PER_THRESHOLD * self.heartbeat_interval:
            raise ValueError(
                f"orphan_threshold ({self.orphan_threshold:g}s) must be at least "
                f"{BEATS_PER_THRESHOLD} x heartbeat_interval ({self.heartbeat_interval:g}s): "
                "with less, one late beat makes a live process look dead, and the jobs it "
                "runs would be recovered and run again")

    @property
    def tracked(self) -> bool:
        """Whether jobs have status records: ``track_jobs``, with reliable fetch (a
        basic-fetch worker pops jobs with BRPOP, outside any script that could write
        their record or drop a cancelled one: an App using it keeps none)."""
        return self.track_jobs and self.fetch == "reliable"

    @property
    def default_queue(self) -> str:
        """The one queue rule: where a job goes when nothing names its queue
        (``@jobs.job()`` without ``queue=``), and where a stored job whose ``queue`` field
        cannot be read is put back (recovery, the poller, an admin retry): "default" when
        the queues include it, else the first."""
        names = self.queue_names
        return "default" if "default" in names else names[0]

    @property
    def queue_names(self) -> list[str]:
        """The queue names, in configured order, without weights."""
        return [spec if isinstance(spec, str) else spec[0] for spec in self.queues]

    @property
    def weighted(self) -> bool:
        """True when any queue has a weight: fetch order is then drawn per fetch."""
        return any(not isinstance(spec, str) for spec in self.queues)

    @property
    def queue_weights(self) -> list[tuple[str, int]]:
        return [(spec, 1) if isinstance(spec, str) else spec for spec in self.queues]


def unserved_limits(settings: Settings) -> list[tuple[str, str]]:
    """The queues ``queue_limits`` or ``group_limits`` names that ``queues`` does not: a
    typo, most often (``"reprots"``), which would limit nothing; a worker says so as it
    starts (not an error: a worker serving a subset, ``run --queue``, shares the App's
    limits). Each with the settings that name it."""
    served = set(settings.queue_names)
    return [(name, " and ".join(what for what, limits in (
                ("queue_limits", settings.queue_limits), ("group_limits", settings.group_limits))
                if name in limits))
            for name in sorted({*settings.queue_limits, *settings.group_limits})
            if name not in served]
