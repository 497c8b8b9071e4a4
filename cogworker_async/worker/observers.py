"""Observers: who hears what became of each run, apart from settling it.

The processor decides a run's outcome, then reports it here before settling; so does
recovery when it takes jobs back from a dead process or buries a repeat orphan. What
listens: the Prometheus metrics (when ``metrics_port`` is set: built by the App's
``wiring.py``, handed in as ``Extras``) and the error and death hooks (when
registered) — each a small object with the methods of ``Observer`` it needs. With
neither, no report is built at all. (The run metrics, always on, are fed by the
processor directly: ``observe/run_metrics.py``.)

An observer is called on the event loop, synchronously, on the hot path: it must be
cheap and must not block (the hooks only queue their calls). One that raises is logged
and skipped: what an observer does never changes how a job is settled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from anyio.abc import TaskStatus

from cogworker_async.jobs.context import JobContext
from cogworker_async.settings import Settings
from cogworker_async.worker.outcome import Ack, Disposition, Filing

if TYPE_CHECKING:
    from cogworker_async.redis.store import Store

log = logging.getLogger(__name__)

Outcome = Literal["succeeded", "retried", "dead", "discarded", "cancelled", "expired",
                  "limited"]
"""What one run came to. Each run has exactly one: a failed run is ``retried`` (it will
run again), ``discarded`` (it raised one of its ``discard_on`` exceptions: dead at once)
or ``dead`` (no retries left, or it can never run: unknown job, bad arguments,
unreadable payload); ``cancelled``: someone cancelled it while it ran (``jobs.cancel``:
acked, not retried — neither a success nor a failure); ``expired``: not run, past its
deadline (``options(expires_in=...)``: filed in dead as ``Expired`` or dropped);
``limited``: a limiter refused it (``OverLimit``): rescheduled, neither a failure nor
a retry (past ``max_limit_reschedules`` it is ``retried`` or ``dead`` like any error)."""

OUTCOMES: Final[tuple[Outcome, ...]] = ("succeeded", "retried", "dead", "discarded",
                                        "cancelled", "expired", "limited")

UNREADABLE: Final = "(unreadable)"
"""The job name reported for a payload that could not be read."""
UNKNOWN: Final = "(unknown)"
"""The run metrics' name for runs of job names this worker has not registered."""


@dataclass(slots=True)
class RunReport:
    """One finished run, as observers see it (not frozen: a frozen dataclass costs a
    microsecond more to build, on every job). Observers must not change it."""

    name: str
    """The registered job name (the payload's ``class``), or ``UNREADABLE``."""
    queue: str
    jid: str | None
    outcome: Outcome
    duration: float
    """Seconds from fetch to decision (0 for a job that could not start)."""
    ended_at: float
    """Epoch seconds the run ended."""
    enqueued_at: float | None
    """Epoch seconds it was (last) put on its queue, when the payload says."""
    started_at: float
    """Epoch seconds its run began (``ended_at - duration``)."""
    error: BaseException | None = None
    entry: dict[str, Any] | None = None
    """The dead entry as filed, for ``dead`` and ``discarded``."""
    context: JobContext | None = None
    """The job's context (what ``current_job()`` gave it), for failed runs."""
    known: bool = True
    """The name is a job this worker has registered (not a payload's invention)."""

    @property
    def failed(self) -> bool:
        return self.outcome not in NOT_FAILED

    @property
    def wait(self) -> float | None:
        """Seconds from enqueue to start, when known."""
        if self.enqueued_at is None:
            return None
        return max(0.0, self.started_at - self.enqueued_at)


@dataclass(frozen=True, slots=True)
class Death:
    """A job that landed in dead, as the death hooks see it."""

    jid: str | None
    name: str | None
    queue: str
    reason: str
    """The error class filed with it: the job's own exception's, or ``ProcessDied``,
    ``UnknownJob``, ``InvalidArguments``, ``UnparseablePayload``..."""
    message: str
    entry: dict[str, Any]
    """The dead entry as filed (the payload with its error fields)."""


NOT_FAILED: Final[frozenset[Outcome]] = frozenset({"succeeded", "cancelled", "expired",
                                                   "limited"})
"""Outcomes that are no failure of the job (the run metrics' failed count)."""


def outcome_of(disposition: Disposition, *, discarded: bool,
               expired: bool = False, limited: bool = False) -> Outcome | None:
    """The outcome of a run from its settled disposition (None: it never ran, it is
    given back). ``discarded``: it failed with one of its ``discard_on`` exceptions;
    ``expired``: it was not run, past its deadline (dead or dropped); ``limited``: a
    limiter refused it and it was rescheduled."""
    if expired:
        return "expired"
    if limited:
        return "limited"
    if isinstance(disposition, Ack):
        return "cancelled" if disposition.ended.state == "cancelled" else "succeeded"
    if isinstance(disposition, Filing):
        if disposition.target == "retry":
            return "retried"
        return "discarded" if discarded else "dead"
    return None


def death_of(report: RunReport) -> Death | None:
    """The death a report tells of, if it sent its job to dead."""
    if report.outcome not in ("dead", "discarded", "expired") or report.entry is None:
        return None
    entry = report.entry
    return Death(jid=report.jid, name=report.name, queue=report.queue,
                 reason=str(entry.get("error_class") or ""),
                 message=str(entry.get("error_message") or ""), entry=entry)


class Observer(Protocol):
    """What an observer may hear. Implement the ones you need (``Observers`` calls
    only those an observer has)."""

    def finished(self, report: RunReport) -> None: ...


class Observers:
    """Fans each report out to every observer; one that raises is logged, not fatal."""

    __slots__ = ("_died", "_finished", "_recovered")

    def __init__(self, observers: Sequence[object] = ()) -> None:
        self._finished = [o.finished for o in observers if hasattr(o, "finished")]
        self._recovered = [o.recovered for o in observers if hasattr(o, "recovered")]
        self._died = [o.died for o in observers if hasattr(o, "died")]

    def __bool__(self) -> bool:
        """Whether anyone listens (else no report need be built)."""
        return bool(self._finished or self._recovered or self._died)

    def finished(self, report: RunReport) -> None:
        for call in self._finished:
            try:
                call(report)
            except Exception:
                log.exception("an observer failed on jid=%s (the job is settled as if "
                              "it had not)", report.jid)

    def recovered(self, queue: str, count: int) -> None:
        """``count`` jobs of ``queue`` were taken back from a dead process."""
        for call in self._recovered:
            try:
                call(queue, count)
            except Exception:
                log.exception("an observer failed on a recovery")

    def died(self, death: Death) -> None:
        """A job landed in dead outside a run (a ``ProcessDied`` burial)."""
        for call in self._died:
            try:
                call(death)
            except Exception:
                log.exception("an observer failed on the death of jid=%s", death.jid)


@dataclass(frozen=True, slots=True)
class Vitals:
    """One worker process's gauges at one moment (``Manager.vitals``)."""

    busy: int
    """Jobs whose run is in progress."""
    concurrency: int
    pending: int
    """Outcomes decided but not yet settled in Redis (it is away)."""
    loop_lag: float
    """Seconds the event loop woke up late, last measured."""
    outbox_rows: int | None = None
    """Outbox rows not yet relayed, at the relay's last look (None: no outbox here)."""
    outbox_lag: float | None = None
    """Seconds the oldest of them has waited."""


class ProcessMetrics(Protocol):
    """A worker's Prometheus metrics (``cogworker_async.prometheus``): an observer and
    the server that shows it."""

    def finished(self, report: RunReport) -> None: ...

    def recovered(self, queue: str, count: int) -> None: ...

    async def serve(self, *, task_status: TaskStatus[None]) -> None:
        """Listen (then report started), serve until cancelled, close."""


class Backlogged(Protocol):
    """What the outbox relay saw at its last look (``outbox/relay.py``'s ``Backlog``)."""

    @property
    def rows(self) -> int: ...

    @property
    def lag(self) -> float: ...


class Relay(Protocol):
    """The outbox relay as the Manager runs it: a task, and its backlog for ``Vitals``."""

    @property
    def backlog(self) -> Backlogged: ...

    async def run(self) -> None: ...


class Extras(Protocol):
    """What builds the extras a worker process runs when its settings ask (the App's
    ``wiring.py``): the worker imports neither extra's package (both sit above it), so
    the Manager is handed their factories."""

    def relay(self, settings: Settings, store: Store, names: Collection[str]
              ) -> Relay | None:
        """The outbox relay, if ``settings.outbox`` asks for one."""

    def metrics(self, settings: Settings, vitals: Callable[[], Vitals],
                registered: Collection[str] = ()) -> ProcessMetrics | None:
        """The process's Prometheus metrics, if ``settings.metrics_port`` asks."""
