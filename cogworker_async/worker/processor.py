"""Processor: runs one fetched job — read, admit, call, decide — then settles it.

Each attempt comes to one ``Verdict``: a gate's (``admission.py``: the job is not run),
or its run's; ``_decide`` fixes it on the attempt, ``_settle`` settles it (the one place
a job's disposition is applied). The verdict is fixed the moment the job returns
(``Attempt.ran``): whatever fails after that (a bug in the bookkeeping, a logging error)
can no longer turn a job that ran into a give-back, which would run it a second time.
Only a job that never started, or was cancelled while running at shutdown, is given back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Final

import anyio

from cogworker_async.errors import OverLimit, ResultNotJSON, Retry
from cogworker_async.jobs import wire
from cogworker_async.jobs.context import JobContext, RunControl
from cogworker_async.jobs.definition import JobDefinition
from cogworker_async.jobs.retries import attempt_of
from cogworker_async.jobs.status import Ended
from cogworker_async.jobs.times import seconds_of
from cogworker_async.limits.limiter import RUNNER, Runner
from cogworker_async.middleware import ServerMiddleware
from cogworker_async.observe.run_metrics import Tally
from cogworker_async.observe.tracing import TraceOptions
from cogworker_async.settings import Settings
from cogworker_async.worker import admission, outcome
from cogworker_async.worker.admission import Admission, LogLine, Ticket, Verdict
from cogworker_async.worker.admission import fields as _fields
from cogworker_async.worker.canceller import Canceller
from cogworker_async.worker.execute import Counters, Executor, Leftover
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.locks import JobLocks
from cogworker_async.worker.observers import (
    NOT_FAILED,
    UNKNOWN,
    UNREADABLE,
    Observers,
    RunReport,
    outcome_of,
)
from cogworker_async.worker.outcome import ACK, Ack, Disposition, Filing, GiveBack, RetryDelays
from cogworker_async.worker.ports import (
    Cancels,
    InFlight,
    RunLocks,
    RunObservers,
    RunStore,
    RunTally,
    Settlement,
)
from cogworker_async.worker.scopes import cancel_scope

if TYPE_CHECKING:  # the worker's own parts fit the ports (mypy checks it; nothing runs)
    from cogworker_async.worker.ledger import Ledger
    from cogworker_async.worker.settlement import Settler

    def _fit(settler: Settler, ledger: Ledger) -> tuple[Settlement, InFlight]:
        return settler, ledger

log = logging.getLogger(__name__)

SUCCEEDED: Final = Verdict(ACK)
"""The verdict of a run that succeeded and keeps no result (every job's: made once)."""


@dataclass(slots=True)
class Attempt:
    """One run of one job, as far as it got."""

    work: Work
    ran: bool = False
    """Decided (by a gate, or its run): from then on never given back."""
    error: BaseException | None = None
    verdict: Verdict | None = None
    """What it came to, once decided (``Processor._decide``), with its disposition."""
    payload: wire.Payload | None = None
    """Set once its locks are settled with it (it may start, or it expired)."""
    leftover: Leftover = field(default_factory=Leftover)
    started: float = field(default_factory=time.monotonic)
    decoded: wire.Payload | None = None
    """The payload as read (``payload`` is set only once the run may start)."""
    definition: JobDefinition | None = None
    scope: anyio.CancelScope | None = None
    control: RunControl | None = None
    """Shared with the canceller while it runs (a cancel asked for it, its progress)."""

    @property
    def disposition(self) -> Disposition | None:
        return None if self.verdict is None else self.verdict.disposition

    def cancelled(self) -> Ack | None:
        """The ack of a run cancelled at someone's request (``jobs.cancel``), or None."""
        return admission.cancelled(self.control, self.payload)

    def fallback(self) -> Disposition:
        """What to do if deciding failed: after a run, never a give-back."""
        if not self.ran:
            return GiveBack()
        if self.error is None:
            return ACK
        return outcome.interrupt(self.work.raw, self.error, now=time.time())


class Processor:
    def __init__(
        self,
        registry: Mapping[str, JobDefinition],
        settings: Settings,
        settler: Settlement,
        counters: Counters,
        ledger: InFlight,
        *,
        store: RunStore,
        middleware: Sequence[ServerMiddleware] = (),
        observers: RunObservers | None = None,
        tally: RunTally | None = None,
        canceller: Cancels | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.settler = settler
        self.counters = counters
        self.ledger = ledger
        self.policy = RetryDelays(settings.retry_base_delay, settings.retry_max_delay)
        self.locks: RunLocks = JobLocks(store)
        self.gates = Admission.standard(self.policy, self.locks)
        """The gates a job passes before its run, in order (``admission.py``)."""
        self.observers: RunObservers = observers if observers is not None else Observers()
        self.tally: RunTally = tally if tally is not None else Tally()
        self.canceller: Cancels = canceller if canceller is not None else Canceller(
            store, settings.identity or "", settings.queue_names)
        self.tracked = settings.tracked
        self.runner = Runner(store, self.canceller.identity)
        """Whose name the limiters a job uses hold their slots in (``limits/limiter.py``): this
        process's identity (the Manager's, which its canceller has too)."""
        self.executor = Executor(counters, middleware, anyio.CapacityLimiter(settings.sync_threads),
                                 store.orphan_count, tracing=settings.tracing,
                                 trace_options=TraceOptions.of(settings))

    async def process(self, work: Work) -> None:
        """Run ``work`` (admitted to the ledger) and settle it; on cancellation, settle
        what it got to. Its slot is released once its thread, if any, has returned."""
        attempt = Attempt(work)
        ledger = self.ledger
        try:
            with cancel_scope() as scope:
                ledger.start(work, scope)
                attempt.scope = scope
                await self._attempt(attempt)
        finally:
            ledger.stop(work)
            # Shielded: a job that ran must be settled even while the worker is being
            # cancelled (each Redis call is bounded by the socket timeout).
            with cancel_scope(shield=True):
                await self._settle(attempt)
            ledger.finish(work)  # after the settle: settled or pending, never a stray
            thread_done = attempt.leftover.thread_done
            if thread_done is not None and not thread_done.is_set():
                await self._hold_slot_for(thread_done)
            ledger.slots.release()

    def _decide(self, attempt: Attempt, verdict: Verdict) -> None:
        """Fix the attempt's verdict (settled by ``_settle``); count it, say it."""
        if verdict.disposition is None:  # dead with its error (a gate's): filed now
            payload, error = attempt.decoded, verdict.error
            if payload is None or error is None:  # a bug: the fallback files the job
                raise RuntimeError("a dead verdict needs the job's payload and error")
            filed = self._filing(payload, None, error, terminal=True)
            verdict = replace(verdict, disposition=filed,
                              note=self._failure_note(attempt, payload, error, filed))
        attempt.verdict = verdict
        counters = self.counters
        counters.processed += verdict.processed
        counters.failed += verdict.failed
        note = verdict.note
        if note is not None:
            log.log(note.level, note.message, *note.args, extra=note.extra)

    async def _settle(self, attempt: Attempt) -> None:
        if attempt.verdict is None:
            cancelled = attempt.cancelled()  # its scope was cancelled for it: no give-back
            if cancelled is not None:
                attempt.ran = True
                self._decide(attempt, Verdict(cancelled, note=LogLine(
                    logging.INFO, "cancelled: jid=%s", (attempt.work.jid,))))
        try:
            disposition = attempt.disposition or attempt.fallback()
        except Exception:  # deciding failed: the fallback's own fallback
            log.exception("jid=%s: deciding its outcome failed", wire.jid_of(attempt.work.raw))
            disposition = outcome.interrupt(attempt.work.raw, RuntimeError("bookkeeping failed"),
                                            now=time.time())
        if attempt.ran and (attempt.verdict is None or attempt.verdict.reported):
            self._report(attempt, disposition)
        await self.settler.settle(attempt.work, disposition)
        if attempt.payload is not None:
            await self.locks.after_settle(attempt.payload, disposition, ran=attempt.ran)

    def _report(self, attempt: Attempt, disposition: Disposition) -> None:
        """Add the run to the run metrics, and tell the observers (Prometheus, hooks)
        what it came to — before it is settled: what they do never changes that. With
        no observer, no report is built: the run metrics alone cost a tally entry
        (``benchmarks/``: a report per job was a measurable share of a no-op job)."""
        try:
            verdict = attempt.verdict
            limited = verdict is not None and verdict.limited
            result = outcome_of(disposition,
                                discarded=verdict is not None and verdict.discarded,
                                expired=verdict is not None and verdict.expired,
                                limited=limited)
            if result is None:
                return
            payload, definition = attempt.decoded, attempt.definition
            duration = time.monotonic() - attempt.started
            ended_at = time.time()
            name = UNREADABLE if payload is None else str(payload["class"])
            # Names come from payloads: runs of names this worker has not registered
            # count as one, so that invented names cannot grow the minute hashes.
            self.tally.add(name if definition is not None else UNKNOWN,
                           ended_at=ended_at, seconds=duration,
                           failed=result not in NOT_FAILED)
            if not self.observers:
                return
            # A limited run is no failure: the failure hooks do not hear of it.
            work, error = attempt.work, None if limited else attempt.error
            report = RunReport(
                name=name, queue=work.queue, jid=work.jid, outcome=result,
                duration=duration, ended_at=ended_at,
                enqueued_at=None if payload is None else wire.number(payload, "enqueued_at"),
                started_at=ended_at - duration, error=error,
                entry=dict(disposition.entry) if isinstance(disposition, Filing) and
                disposition.target == "dead" else None,
                context=None if error is None or payload is None else
                self._context(definition, payload, work.queue),
                known=definition is not None)
        except Exception:
            log.exception("jid=%s: reporting its outcome failed", attempt.work.jid)
            return
        self.observers.finished(report)

    def _context(self, definition: JobDefinition | None, payload: wire.Payload,
                 queue: str) -> JobContext:
        """The context a failed run had (or would have had: an unknown job never ran)."""
        if definition is not None:
            return self.executor.context(definition, payload, queue)
        return JobContext(jid=str(payload["jid"]), name=str(payload["class"]), queue=queue,
                          attempt=attempt_of(payload),
                          enqueued_at=wire.number(payload, "enqueued_at"),
                          created_at=wire.number(payload, "created_at"),
                          payload=dict(payload), _orphanings=partial(
                              self.executor.orphanings, queue, str(payload["jid"])))

    async def _hold_slot_for(self, thread_done: anyio.Event) -> None:
        """A timed-out plain function still runs in its thread: its slot stays busy."""
        log.warning("a timed-out plain job's thread still runs: its slot stays busy until "
                    "it returns")
        await thread_done.wait()

    async def _attempt(self, attempt: Attempt) -> None:
        """Read the job and pass it through the gates; run it if none gives a verdict."""
        work = attempt.work
        found = admission.read(work, self.settings.max_payload_bytes)
        if isinstance(found, Verdict):
            await self._refuse(attempt, found)
            return
        payload = found
        work.jid = payload["jid"]
        attempt.decoded = payload
        definition = attempt.definition = self.registry.get(payload["class"])
        ticket = Ticket(work.queue, payload, definition)
        verdict = await self.gates.before(ticket)
        if verdict is not None or definition is None:  # (no definition: Unregistered's)
            await self._refuse(attempt, verdict or admission.unregistered(payload))
            return
        attempt.payload = payload
        await self._run(attempt, ticket, definition, payload)

    async def _refuse(self, attempt: Attempt, verdict: Verdict) -> None:
        """A gate's verdict: the job is not run, and gets that instead."""
        attempt.ran = True
        if verdict.error is not None:
            attempt.error = verdict.error
        if verdict.locks:
            attempt.payload = attempt.decoded
        self._decide(attempt, verdict)
        if verdict.unstarted and attempt.decoded is not None:
            await self.locks.never_started(attempt.decoded)

    async def _run(self, attempt: Attempt, ticket: Ticket, definition: JobDefinition,
                   payload: wire.Payload) -> None:
        """Run a job that may run; decide what it came to."""
        work = attempt.work
        canceller = self.canceller
        control = None
        if self.tracked:  # without records there are no cancels and no progress to write
            control = attempt.control = ticket.control = RunControl(
                work.queue, payload["jid"],
                stop=attempt.scope.cancel if definition.is_async and attempt.scope else None)
            canceller.start(control)
        running = RUNNER.set(self.runner)
        try:
            verdict = await self.gates.starting(ticket)
            if verdict is not None:  # never started
                await self._refuse(attempt, verdict)
                return
            await self.executor.run(definition, payload, work.queue, attempt.leftover,
                                    control)
        except (Exception, SystemExit) as exc:  # the job failed; the worker goes on
            attempt.ran, attempt.error = True, exc
            self._decide(attempt, self._failure(attempt, definition, payload, exc))
            return
        finally:
            RUNNER.reset(running)
            if control is not None:
                canceller.finish(control)
        attempt.ran = True
        keep = wire.number(payload, "keep_result")
        verdict = SUCCEEDED if keep is None else self._kept(attempt, definition, payload, keep)
        self._decide(attempt, verdict)
        if verdict.error is None and log.isEnabledFor(logging.INFO):
            # Logged after the run, outside its context: the job's fields by hand.
            log.info("done: %s jid=%s in %.3fs", definition.name, payload["jid"],
                     time.monotonic() - attempt.started,
                     extra=_fields(payload, definition.name, work.queue))

    def _failure(self, attempt: Attempt, definition: JobDefinition, payload: wire.Payload,
                 error: BaseException) -> Verdict:
        """What a run that raised ``error`` comes to: cancelled (it stopped itself, or
        was told), rescheduled (a limiter refused it), or failed (retried, or dead)."""
        cancelled = attempt.cancelled()
        if cancelled is not None:
            return Verdict(cancelled, error=error, note=LogLine(
                logging.INFO, "cancelled: %s jid=%s (%s)",
                (definition.name, payload["jid"], type(error).__name__)))
        if isinstance(error, OverLimit):
            limited = self._limited(attempt, payload, error)
            if limited is not None:
                return limited
        discarded = isinstance(error, definition.discard_on)
        filed = self._filing(payload, definition, error, terminal=discarded)
        return Verdict(filed, error=error, discarded=discarded,
                       note=self._failure_note(attempt, payload, error, filed))

    def _kept(self, attempt: Attempt, definition: JobDefinition, payload: wire.Payload,
              keep: float) -> Verdict:
        """Ack with the result to keep; dead if it cannot be kept."""
        try:
            result = wire.encode_result(attempt.leftover.result, self.settings.max_payload_bytes)
        except (TypeError, ValueError) as exc:  # it did its work: dead, never run again
            error = attempt.error = ResultNotJSON(f"{definition.name} returned a result that "
                                                  f"cannot be kept: {exc}")
            filed = self._filing(payload, definition, error, terminal=True)
            return Verdict(filed, error=error,
                           note=self._failure_note(attempt, payload, error, filed))
        return Verdict(Ack(Ended(result=result, keep=keep)))

    def _limited(self, attempt: Attempt, payload: wire.Payload,
                 error: OverLimit) -> Verdict | None:
        """Reschedule a run a limiter refused, without counting a failure or a retry;
        None once it was rescheduled ``max_limit_reschedules`` times (it fails then)."""
        filed = outcome.after_over_limit(payload, error, now=time.time(),
                                         max_reschedules=self.settings.max_limit_reschedules)
        if filed is None:
            return None
        # The counting middleware saw an exception escape and counted a failure: this
        # run was refused, not failed (the stats' failed count is of failures).
        return Verdict(filed, error=error, limited=True, failed=-1, note=LogLine(
            logging.INFO, "over limit: %s jid=%s: %s -> rescheduled in %.1fs (%d of %d)",
            (payload["class"], payload["jid"], error, filed.delay,
             outcome.limited_count(filed.entry), self.settings.max_limit_reschedules),
            _fields(payload, str(payload["class"]), attempt.work.queue)))

    def _filing(self, payload: wire.Payload, definition: JobDefinition | None,
                error: BaseException, *, terminal: bool) -> Filing:
        """Where a failed job goes: its retry, or dead (``outcome.after_failure``)."""
        return outcome.after_failure(payload, error, now=time.time(), policy=self.policy,
                                     terminal=terminal,
                                     delay=lambda: self._requested_delay(definition, payload,
                                                                         error))

    @staticmethod
    def _failure_note(attempt: Attempt, payload: wire.Payload, error: BaseException,
                      filed: Filing) -> LogLine:
        return LogLine(logging.WARNING, "failed: %s jid=%s: %s: %s -> %s%s",
                    (payload["class"], payload["jid"], type(error).__name__, error,
                     filed.target, f" in {filed.delay:.1f}s" if filed.target == "retry" else ""),
                    _fields(payload, str(payload["class"]), attempt.work.queue))

    @staticmethod
    def _requested_delay(definition: JobDefinition | None, payload: wire.Payload,
                         error: BaseException) -> float | None:
        """The delay the job asked for: ``raise Retry(in_=...)``, or its ``retry_in``."""
        if isinstance(error, Retry):
            return error.delay
        if definition is None or definition.retry_in is None:
            return None
        try:
            wanted = definition.retry_in(attempt_of(payload), error)
            return None if wanted is None else max(0.0, seconds_of(wanted, "retry_in's answer"))
        except Exception:
            log.exception("%s: retry_in failed; using the default delay", definition.name)
            return None
