"""Admission: the gates a fetched job passes, in order, before it may run.

Each gate has one job: it looks at what it is given (``Ticket``: the payload, its
definition, the run's control) and says "go on" (None) or gives its ``Verdict``: what
the job gets instead of its run (dead with a reason, dropped, acked unrun, rescheduled).
The processor runs the gates in the order below, stops at the first verdict, and settles
that verdict (``Processor._settle``), exactly as it settles a run's outcome.

    read            Unreadable     the bytes are no job: dead, the bytes kept
    BEFORE_START    Unregistered   no job of that name here: dead (UnknownJob)
                    BadArguments   its arguments fit no call of it: dead (InvalidArguments),
                                   or lack its parent's result: dead (ParentResultMissing)
                    PastDeadline   past its deadline: dead (Expired) or dropped
                    Overlapping    its periodic predecessor still runs: acked, unreported
    (the run is registered with the canceller: ``Ticket.control``)
    AT_START        Cancelled      a cancel came before it started: acked cancelled
    (the run; a limiter's ``OverLimit`` is raised inside it: the run's outcome, judged
    by the processor, not a gate)

Why the order matters, and where a new gate goes:
- a gate sees only what the gates before it let through: ``read`` makes the payload,
  ``Unregistered`` guarantees the definition every later gate may use;
- a job that can never run is dead whatever its deadline (BadArguments before PastDeadline);
- pure gates (a decision from what they are given: no I/O, so unit-tested alone) come
  before the gates that ask Redis (``AsyncGate``): a job refused for free costs no round
  trip and takes nothing;
- ``Overlapping`` takes the periodic running lock, and frees an ``until_started`` unique
  lock as a start does: a gate after it refuses a job that holds its locks, so its
  verdict says ``locks=True`` (they are released after the settle, as after a run);
- ``Cancelled`` needs the run's control, which exists only once the run is registered
  with the canceller: gates needing it go in ``AT_START``.
Where a new rule goes: most do not come here. The rules of the last round (dedup
modes, dependencies, batches, priorities, fair groups) are each kept in the Lua move
that pushes or fetches the job (``redis/lua/``): decided in the same step that moves it,
they cannot race another process, and a refused job never reaches a worker. A gate here
is still right for a decision that needs what only the worker has: the decoded payload
and the registry (which function, its arguments, its options), or this run's control.
Such a pure gate goes in BEFORE_START before ``Overlapping``; one that must take
something in Redis goes after it, awaitable, and must have what it took given back
(nothing here releases it yet).

A gate never logs nor counts: its verdict says what to log (``LogLine``, logged by the
processor under its own logger) and what to count (``processed``, ``failed``).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, cast

from cogworker_async.errors import (
    InvalidArguments,
    ParentResultMissing,
    UnknownJob,
    UnparseablePayload,
)
from cogworker_async.jobs import wire
from cogworker_async.jobs.context import RunControl
from cogworker_async.jobs.definition import JobDefinition
from cogworker_async.jobs.retries import attempt_of
from cogworker_async.jobs.status import Ended
from cogworker_async.worker import outcome
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.outcome import ACK, Ack, Disposition, Filing, RetryDelays
from cogworker_async.worker.ports import RunLocks


@dataclass(frozen=True, slots=True)
class LogLine:
    """A line the processor logs for a verdict (``logging`` arguments)."""

    level: int
    message: str
    args: tuple[object, ...] = ()
    extra: Mapping[str, object] | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one attempt comes to, from a gate or from its run: settled once, as is."""

    disposition: Disposition | None
    """What the job gets. None: dead with ``error``, filed as any terminal failure once
    the attempt counts as decided (``Processor._decide``: should building that entry
    fail, the job is filed by the fallback, never given back)."""
    error: BaseException | None = None
    """The error reported with it (the failure hooks see it; none for a limited run)."""
    processed: int = 0
    failed: int = 0
    """What it adds to the processed/failed counts (``Counters``)."""
    reported: bool = True
    """Told to the run metrics and observers (not: a skipped periodic overlap)."""
    expired: bool = False
    limited: bool = False
    discarded: bool = False
    """Its outcome, where the disposition alone does not say (``observers.outcome_of``)."""
    locks: bool = False
    """The job's locks are settled with it (``JobLocks.after_settle``), as after a run."""
    unstarted: bool = False
    """It will never start: its ``until_started`` lock is freed now (``never_started``)."""
    note: LogLine | None = None


@dataclass(slots=True)
class Ticket:
    """What the gates see of one attempt."""

    queue: str
    payload: wire.Payload
    definition: JobDefinition | None
    control: RunControl | None = None
    """The run's control, once registered with the canceller (the AT_START gates)."""
    clock: Callable[[], float] = field(default=time.time)
    """Epoch seconds now: read when a gate decides (a test passes a fixed one)."""


class Gate(Protocol):
    """A pure gate: decides from the ticket alone."""

    def check(self, ticket: Ticket) -> Verdict | None: ...


class AsyncGate(Protocol):
    """A gate that must ask outside (Redis) to decide."""

    async def check(self, ticket: Ticket) -> Verdict | None: ...


def fields(payload: wire.Payload, name: str, queue: str) -> dict[str, object]:
    """A job's log fields (``logs.JOB_FIELDS``) for a line about it logged outside its run."""
    return {"jid": payload["jid"], "job": name, "queue": queue,
            "attempt": attempt_of(payload)}


def dead(error: Exception) -> Verdict:
    """Dead with ``error``: it can never run (counted as a failed run)."""
    return Verdict(None, error=error, processed=1, failed=1)


def cancelled(control: RunControl | None, payload: wire.Payload | None) -> Ack | None:
    """The ack of a run cancelled at someone's request (``jobs.cancel``), or None."""
    if control is None or not control.cancel_requested:
        return None
    keep = None if payload is None else wire.number(payload, "keep_result")
    return Ack(Ended("cancelled", keep=keep))


def read(work: Work, max_bytes: int, *, clock: Callable[[], float] = time.time
         ) -> wire.Payload | Verdict:
    """Unreadable, the first gate: the payload, or dead with the bytes as fetched (no
    payload: nothing after it can look at the job)."""
    try:
        return wire.decode(work.raw, max_bytes)
    except UnparseablePayload as exc:
        filed = outcome.unparseable(work.raw, queue=work.queue, reason=str(exc), now=clock())
        return Verdict(filed, processed=1, failed=1, note=LogLine(
            logging.ERROR, "unreadable job on queue %r moved to dead: %s", (work.queue, exc)))


class Unregistered:
    """No job of that name is registered here: dead (``UnknownJob``)."""

    def check(self, ticket: Ticket) -> Verdict | None:
        if ticket.definition is not None:
            return None
        return unregistered(ticket.payload)


def unregistered(payload: wire.Payload) -> Verdict:
    return dead(UnknownJob(f"no job registered as {payload['class']!r}"))


class BadArguments:
    """Its arguments fit no call of its function: dead (``InvalidArguments``); or its
    first argument is a parent's result it does not hold (``missing_result_of``: filed
    dead without it, then retried by hand): dead (``ParentResultMissing``), never run
    with None in its place."""

    def check(self, ticket: Ticket) -> Verdict | None:
        definition, payload = ticket.definition, ticket.payload
        if definition is None:
            return None
        if "missing_result_of" in payload:  # the one cost to every job: a key lookup
            return dead(missing_result(payload))
        try:
            definition.check_arguments(payload["args"], payload["kwargs"])
        except TypeError as exc:
            return dead(InvalidArguments(str(exc)))
        return None


def missing_result(payload: wire.Payload) -> ParentResultMissing:
    """Why a job retried without its parent's result is filed dead again: which job,
    which parent, and what it was first filed for."""
    parent = wire.text(payload, "missing_result_of") or "?"
    cause = wire.text(payload, "error_class") or "?"
    return ParentResultMissing(
        f"job {payload['jid']} takes the result of parent {parent}, which it does not "
        f"hold: it was filed dead without it ({cause}) and retried; it is not run with "
        "None in its place (enqueue it again after a parent that keeps its result)")


class PastDeadline:
    """Not started by its deadline (``expires_at``): dead as ``Expired``, or dropped
    (``dead_on_expiry=False``). Counted as processed, not failed; said once."""

    def __init__(self, policy: RetryDelays) -> None:
        self.policy = policy

    def check(self, ticket: Ticket) -> Verdict | None:
        payload = ticket.payload
        dropped = outcome.expired(payload, now=ticket.clock(), policy=self.policy)
        if dropped is None:
            return None
        name = str(payload["class"])
        return Verdict(dropped, processed=1, expired=True, locks=True, unstarted=True,
                       note=LogLine(logging.WARNING,
                                 "expired: %s jid=%s not started by its deadline -> %s",
                                 (payload["class"], payload["jid"],
                                  "dead" if isinstance(dropped, Filing) else "dropped"),
                                 fields(payload, name, ticket.queue)))


SKIPPED: Final = Verdict(ACK, reported=False)
"""Not run, another run holds its lock: acked, not reported (never overlaps)."""


class Overlapping:
    """Its periodic predecessor still runs (``JobLocks.before_run``): skipped. Taking
    the running lock, it frees an ``until_started`` unique lock, as a start does."""

    def __init__(self, locks: RunLocks) -> None:
        self.locks = locks

    async def check(self, ticket: Ticket) -> Verdict | None:
        return None if await self.locks.before_run(ticket.payload) else SKIPPED


class Cancelled:
    """A cancel came before it started (the canceller applies one asked for earlier as
    the run registers): acked cancelled, never run."""

    def check(self, ticket: Ticket) -> Verdict | None:
        ack = cancelled(ticket.control, ticket.payload)
        if ack is None:
            return None
        return Verdict(ack, locks=True, note=LogLine(
            logging.INFO, "cancelled before it started: jid=%s", (ticket.payload["jid"],)))


async def admit(gates: Sequence[Gate | AsyncGate], ticket: Ticket) -> Verdict | None:
    """The first verdict of ``gates``, in order (None: every gate lets it go on)."""
    return await _first(_steps(gates), ticket)


Step = tuple[Callable[[Ticket], object], bool]
"""A gate's ``check``, and whether it is awaited (its verdict comes from outside)."""


def _steps(gates: Sequence[Gate | AsyncGate]) -> tuple[Step, ...]:
    return tuple((gate.check, inspect.iscoroutinefunction(gate.check)) for gate in gates)


async def _first(steps: tuple[Step, ...], ticket: Ticket) -> Verdict | None:
    for check, awaits in steps:
        found = check(ticket)
        verdict = await cast("Awaitable[Verdict | None]", found) if awaits else found
        if verdict is not None:
            return cast(Verdict, verdict)
    return None


class Admission:
    """The path of one processor: its gates before the start, and at the start."""

    def __init__(self, before_start: Sequence[Gate | AsyncGate],
                 at_start: Sequence[Gate | AsyncGate]) -> None:
        self.before_start = tuple(before_start)
        self.at_start = tuple(at_start)
        # Which checks to await, found once (not per job: this is every job's path).
        self._before, self._at = _steps(self.before_start), _steps(self.at_start)

    @classmethod
    def standard(cls, policy: RetryDelays, locks: RunLocks) -> Admission:
        """The worker's gates, in the order of the module's docstring."""
        return cls(before_start=(Unregistered(), BadArguments(), PastDeadline(policy),
                                 Overlapping(locks)),
                   at_start=(Cancelled(),))

    async def before(self, ticket: Ticket) -> Verdict | None:
        """The first verdict of the gates before the start."""
        return await _first(self._before, ticket)

    async def starting(self, ticket: Ticket) -> Verdict | None:
        """The first verdict of the gates at the start (the run registered)."""
        return await _first(self._at, ticket)
