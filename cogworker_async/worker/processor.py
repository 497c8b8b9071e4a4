"""Processor: runs one fetched job — decode, look up, call, decide — then settles it.

The disposition is fixed the moment the job returns (``Attempt.ran``): whatever fails
after that (a bug in the bookkeeping, a logging error) can no longer turn a job that ran
into a give-back, which would run it a second time. Only a job that never started, or
was cancelled while running at shutdown, is given back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import anyio

from cogworker_async import job
from cogworker_async.context import JobContext, RunControl
from cogworker_async.definition import JobDefinition
from cogworker_async.errors import (
    InvalidArguments,
    OverLimit,
    ResultNotJSON,
    Retry,
    UnknownJob,
    UnparseablePayload,
)
from cogworker_async.limiter import RUNNER, Runner
from cogworker_async.middleware import ServerMiddleware
from cogworker_async.redis.store import Store
from cogworker_async.retries import attempt_of
from cogworker_async.run_metrics import Tally
from cogworker_async.settings import Settings
from cogworker_async.status import Ended
from cogworker_async.tracing import TraceOptions
from cogworker_async.worker import outcome
from cogworker_async.worker.canceller import Canceller
from cogworker_async.worker.execute import Counters, Executor, Leftover
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.locks import JobLocks
from cogworker_async.worker.observers import (
    NOT_FAILED,
    UNKNOWN,
    UNREADABLE,
    Observers,
    RunReport,
    outcome_of,
)
from cogworker_async.worker.outcome import (
    ACK,
    Ack,
    Disposition,
    Filing,
    GiveBack,
    RetryPolicy,
)
from cogworker_async.worker.settlement import Settler

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Attempt:
    """One run of one job, as far as it got."""

    work: Work
    ran: bool = False
    error: BaseException | None = None
    disposition: Disposition | None = None
    payload: job.Payload | None = None
    leftover: Leftover = field(default_factory=Leftover)
    started: float = field(default_factory=time.monotonic)
    decoded: job.Payload | None = None
    """The payload as read (``payload`` is set only once the run may start)."""
    definition: JobDefinition | None = None
    skipped: bool = False
    """Not run: another run holds its lock (``JobLocks``); acked, not reported."""
    discarded: bool = False
    """Failed with one of its ``discard_on`` exceptions."""
    expired: bool = False
    """Not run: past its deadline (``expires_at``)."""
    limited: bool = False
    """Refused by a limiter (``OverLimit``) and rescheduled: not a failure."""
    scope: anyio.CancelScope | None = None
    control: RunControl | None = None
    """Shared with the canceller while it runs (a cancel asked for it, its progress)."""

    def cancelled(self) -> Ack | None:
        """The ack of a run cancelled at someone's request (``jobs.cancel``), or None."""
        control = self.control
        if control is None or not control.cancel_requested:
            return None
        keep = None if self.payload is None else job.number(self.payload, "keep_result")
        return Ack(Ended("cancelled", keep=keep))

    def fallback(self) -> Disposition:
        """What to do if deciding failed: after a run, never a give-back."""
        if not self.ran:
            return GiveBack()
        if self.error is None:
            return ACK
        return outcome.interrupt(self.work.raw, self.error, now=time.time())


def _fields(payload: job.Payload, name: str, queue: str) -> dict[str, object]:
    """A job's log fields (``logs.JOB_FIELDS``) for a line about it logged outside its run."""
    return {"jid": payload["jid"], "job": name, "queue": queue,
            "attempt": attempt_of(payload)}


class Processor:
    def __init__(
        self,
        registry: Mapping[str, JobDefinition],
        settings: Settings,
        settler: Settler,
        counters: Counters,
        ledger: Ledger,
        *,
        store: Store,
        middleware: Sequence[ServerMiddleware] = (),
        observers: Observers | None = None,
        tally: Tally | None = None,
        canceller: Canceller | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.settler = settler
        self.counters = counters
        self.ledger = ledger
        self.policy = RetryPolicy(settings.retry_base_delay, settings.retry_max_delay)
        self.locks = JobLocks(store)
        self.observers = observers if observers is not None else Observers()
        self.tally = tally if tally is not None else Tally()
        self.canceller = canceller if canceller is not None else Canceller(
            store, settings.identity or "", settings.queue_names)
        self.tracked = settings.tracked
        self.runner = Runner(store, self.canceller.identity)
        """Whose name the limiters a job uses hold their slots in (``limiter.py``): this
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
            with anyio.CancelScope() as scope:
                ledger.start(work, scope)
                attempt.scope = scope
                await self._attempt(attempt)
        finally:
            ledger.stop(work)
            # Shielded: a job that ran must be settled even while the worker is being
            # cancelled (each Redis call is bounded by the socket timeout).
            with anyio.CancelScope(shield=True):
                await self._settle(attempt)
            ledger.finish(work)  # after the settle: settled or pending, never a stray
            thread_done = attempt.leftover.thread_done
            if thread_done is not None and not thread_done.is_set():
                await self._hold_slot_for(thread_done)
            ledger.slots.release()

    async def _settle(self, attempt: Attempt) -> None:
        if attempt.disposition is None:
            cancelled = attempt.cancelled()  # its scope was cancelled for it: no give-back
            if cancelled is not None:
                attempt.ran, attempt.disposition = True, cancelled
                log.info("cancelled: jid=%s", attempt.work.jid)
        try:
            disposition = attempt.disposition or attempt.fallback()
        except Exception:  # deciding failed: the fallback's own fallback
            log.exception("jid=%s: deciding its outcome failed", job.jid_of(attempt.work.raw))
            disposition = outcome.interrupt(attempt.work.raw, RuntimeError("bookkeeping failed"),
                                            now=time.time())
        if attempt.ran and not attempt.skipped:
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
            result = outcome_of(disposition, discarded=attempt.discarded,
                                expired=attempt.expired, limited=attempt.limited)
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
            work, error = attempt.work, None if attempt.limited else attempt.error
            report = RunReport(
                name=name, queue=work.queue, jid=work.jid, outcome=result,
                duration=duration, ended_at=ended_at,
                enqueued_at=None if payload is None else job.number(payload, "enqueued_at"),
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

    def _context(self, definition: JobDefinition | None, payload: job.Payload,
                 queue: str) -> JobContext:
        """The context a failed run had (or would have had: an unknown job never ran)."""
        if definition is not None:
            return self.executor.context(definition, payload, queue)
        return JobContext(jid=str(payload["jid"]), name=str(payload["class"]), queue=queue,
                          attempt=attempt_of(payload),
                          enqueued_at=job.number(payload, "enqueued_at"),
                          created_at=job.number(payload, "created_at"),
                          payload=dict(payload), _orphanings=partial(
                              self.executor.orphanings, queue, str(payload["jid"])))

    async def _hold_slot_for(self, thread_done: anyio.Event) -> None:
        """A timed-out plain function still runs in its thread: its slot stays busy."""
        log.warning("a timed-out plain job's thread still runs: its slot stays busy until "
                    "it returns")
        await thread_done.wait()

    async def _attempt(self, attempt: Attempt) -> None:
        work = attempt.work
        try:
            payload = job.decode(work.raw, self.settings.max_payload_bytes)
        except UnparseablePayload as exc:
            log.error("unreadable job on queue %r moved to dead: %s", work.queue, exc)
            attempt.ran = True
            attempt.disposition = outcome.unparseable(work.raw, queue=work.queue,
                                                      reason=str(exc), now=time.time())
            self.counters.processed += 1
            self.counters.failed += 1
            return
        work.jid = payload["jid"]
        attempt.decoded = payload
        definition = attempt.definition = self.registry.get(payload["class"])
        problem = self._check(definition, payload)
        if problem is not None or definition is None:
            attempt.ran = True
            attempt.error = problem
            self.counters.processed += 1
            self.counters.failed += 1
            self._failed(attempt, payload, None, problem or UnknownJob(), terminal=True)
            return
        dropped = outcome.expired(payload, now=time.time(), policy=self.policy)
        if dropped is not None:
            self._expired(attempt, payload, dropped)
            await self.locks.never_started(payload)
            return
        if not await self.locks.before_run(payload):
            # skipped: never overlaps
            attempt.ran, attempt.skipped, attempt.disposition = True, True, ACK
            return
        attempt.payload = payload
        await self._run(attempt, definition, payload)

    async def _run(self, attempt: Attempt, definition: JobDefinition,
                   payload: job.Payload) -> None:
        """Run a job that may run; decide what it came to."""
        work = attempt.work
        canceller = self.canceller
        control = None
        if self.tracked:  # without records there are no cancels and no progress to write
            control = attempt.control = RunControl(
                work.queue, payload["jid"],
                stop=attempt.scope.cancel if definition.is_async and attempt.scope else None)
            canceller.start(control)
        running = RUNNER.set(self.runner)
        try:
            if control is not None and control.cancel_requested:  # never started
                attempt.ran, attempt.disposition = True, attempt.cancelled()
                log.info("cancelled before it started: jid=%s", payload["jid"])
                return
            await self.executor.run(definition, payload, work.queue, attempt.leftover,
                                    control)
        except (Exception, SystemExit) as exc:  # the job failed; the worker goes on
            attempt.ran, attempt.error = True, exc
            cancelled = attempt.cancelled()
            if cancelled is not None:  # it stopped itself (a plain function), or was told
                attempt.disposition = cancelled
                log.info("cancelled: %s jid=%s (%s)", definition.name, payload["jid"],
                         type(exc).__name__)
                return
            if isinstance(exc, OverLimit) and self._limited(attempt, payload, exc):
                return
            attempt.discarded = isinstance(exc, definition.discard_on)
            self._failed(attempt, payload, definition, exc, terminal=attempt.discarded)
            return
        finally:
            RUNNER.reset(running)
            if control is not None:
                canceller.finish(control)
        attempt.ran = True
        keep = job.number(payload, "keep_result")
        if keep is None:
            attempt.disposition = ACK
        elif not self._kept(attempt, definition, payload, keep):
            return
        if log.isEnabledFor(logging.INFO):
            # Logged after the run, outside its context: the job's fields by hand.
            log.info("done: %s jid=%s in %.3fs", definition.name, payload["jid"],
                     time.monotonic() - attempt.started,
                     extra=_fields(payload, definition.name, work.queue))

    def _kept(self, attempt: Attempt, definition: JobDefinition, payload: job.Payload,
              keep: float) -> bool:
        """Ack with the result to keep; False if it cannot be kept (filed in dead)."""
        try:
            result = job.encode_result(attempt.leftover.result, self.settings.max_payload_bytes)
        except (TypeError, ValueError) as exc:  # it did its work: dead, never run again
            attempt.error = ResultNotJSON(f"{definition.name} returned a result that "
                                          f"cannot be kept: {exc}")
            self._failed(attempt, payload, definition, attempt.error, terminal=True)
            return False
        attempt.disposition = Ack(Ended(result=result, keep=keep))
        return True

    def _check(self, definition: JobDefinition | None, payload: job.Payload) -> Exception | None:
        if definition is None:
            return UnknownJob(f"no job registered as {payload['class']!r}")
        try:
            definition.check_arguments(payload["args"], payload["kwargs"])
        except TypeError as exc:
            return InvalidArguments(str(exc))
        return None

    def _expired(self, attempt: Attempt, payload: job.Payload, dropped: Disposition) -> None:
        """Not started by its deadline: not run, counted and said once (and its unique
        lock released after the settle, as for a run: ``attempt.payload``)."""
        attempt.ran = attempt.expired = True
        attempt.payload, attempt.disposition = payload, dropped
        self.counters.processed += 1
        log.warning("expired: %s jid=%s not started by its deadline -> %s",
                    payload["class"], payload["jid"],
                    "dead" if isinstance(dropped, Filing) else "dropped",
                    extra=_fields(payload, str(payload["class"]), attempt.work.queue))

    def _limited(self, attempt: Attempt, payload: job.Payload, error: OverLimit) -> bool:
        """Reschedule a run a limiter refused, without counting a failure or a retry;
        False once it was rescheduled ``max_limit_reschedules`` times (it fails then)."""
        filed = outcome.after_over_limit(payload, error, now=time.time(),
                                         max_reschedules=self.settings.max_limit_reschedules)
        if filed is None:
            return False
        attempt.limited, attempt.disposition = True, filed
        # The counting middleware saw an exception escape and counted a failure: this
        # run was refused, not failed (the stats' failed count is of failures).
        self.counters.failed -= 1
        log.info("over limit: %s jid=%s: %s -> rescheduled in %.1fs (%d of %d)",
                 payload["class"], payload["jid"], error, filed.delay,
                 outcome.limited_count(filed.entry), self.settings.max_limit_reschedules,
                 extra=_fields(payload, str(payload["class"]), attempt.work.queue))
        return True

    def _failed(
        self,
        attempt: Attempt,
        payload: job.Payload,
        definition: JobDefinition | None,
        error: BaseException,
        *,
        terminal: bool,
    ) -> None:
        filed = outcome.after_failure(payload, error, now=time.time(), policy=self.policy,
                                      terminal=terminal,
                                      delay=lambda: self._requested_delay(definition, payload,
                                                                          error))
        attempt.disposition = filed
        log.warning("failed: %s jid=%s: %s: %s -> %s%s", payload["class"], payload["jid"],
                    type(error).__name__, error, filed.target,
                    f" in {filed.delay:.1f}s" if filed.target == "retry" else "",
                    extra=_fields(payload, str(payload["class"]), attempt.work.queue))

    @staticmethod
    def _requested_delay(definition: JobDefinition | None, payload: job.Payload,
                         error: BaseException) -> float | None:
        """The delay the job asked for: ``raise Retry(in_=...)``, or its ``retry_in``."""
        if isinstance(error, Retry):
            return error.delay
        if definition is None or definition.retry_in is None:
            return None
        try:
            wanted = definition.retry_in(attempt_of(payload), error)
        except Exception:
            log.exception("%s: retry_in failed; using the default delay", definition.name)
            return None
        return None if wanted is None else max(0.0, float(wanted))
