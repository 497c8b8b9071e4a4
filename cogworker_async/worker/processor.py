"""Processor: runs one fetched job — decode, look up, call, decide — then settles it.

The disposition is fixed the moment the job returns (``Attempt.ran``): whatever fails
after that (a bug in the bookkeeping, a logging error) can no longer turn a job that ran
into a give-back, which would run it a second time. Only a job that never started, or
was cancelled while running at shutdown, is given back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Final

import anyio

from cogworker_async import job
from cogworker_async.errors import InvalidArguments, UnknownJob, UnparseablePayload
from cogworker_async.registry import JobDefinition
from cogworker_async.settings import Settings
from cogworker_async.worker import outcome
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.outcome import Ack, Disposition, GiveBack, RetryPolicy
from cogworker_async.worker.settlement import Settler

log = logging.getLogger("cogworker_async")

SETTLE_TIMEOUT: Final = 30.0
"""Seconds a settle may take once a job is done, even while the worker is cancelled."""


@dataclass(slots=True)
class Stats:
    """Counts kept in memory and flushed to Redis by the Manager in batches."""

    processed: int = 0
    failed: int = 0


@dataclass(slots=True)
class Attempt:
    """One run of one job, as far as it got."""

    work: Work
    ran: bool = False
    error: BaseException | None = None
    disposition: Disposition | None = None
    started: float = field(default_factory=time.monotonic)

    def fallback(self) -> Disposition:
        """What to do if deciding failed: after a run, never a give-back."""
        if not self.ran:
            return GiveBack()
        if self.error is None:
            return Ack()
        return outcome.interrupt(self.work.raw, self.error, now=time.time())


class Processor:
    def __init__(
        self,
        registry: Mapping[str, JobDefinition],
        settings: Settings,
        settler: Settler,
        stats: Stats,
        running: dict[bytes, Work],
        on_done: Callable[[], None],
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.settler = settler
        self.stats = stats
        self.running = running
        self.on_done = on_done
        self.policy = RetryPolicy(settings.retry_base_delay, settings.retry_max_delay)
        self.limiter = anyio.CapacityLimiter(settings.sync_threads)
        self.scopes: dict[bytes, anyio.CancelScope] = {}

    async def process(self, work: Work) -> None:
        """Run ``work`` and settle it; on cancellation, settle what it got to."""
        attempt = Attempt(work)
        self.running[work.raw] = work
        try:
            with anyio.CancelScope() as scope:
                self.scopes[work.raw] = scope
                await self._attempt(attempt)
        finally:
            self.scopes.pop(work.raw, None)
            try:
                disposition = attempt.disposition or attempt.fallback()
            except Exception:  # deciding failed: the fallback's own fallback
                log.exception("jid=%s: deciding its outcome failed", job.jid_of(work.raw))
                disposition = outcome.interrupt(work.raw, RuntimeError("bookkeeping failed"),
                                                now=time.time())
            with anyio.move_on_after(SETTLE_TIMEOUT, shield=True):
                await self.settler.settle(work, disposition)
            self.running.pop(work.raw, None)
            self.on_done()

    def cancel_unlisted(self, listed: set[bytes]) -> int:
        """Cancel the jobs no longer on this process's in-progress list (recovered by
        another process while this one was paused); returns how many."""
        cancelled = 0
        for raw, scope in list(self.scopes.items()):
            if raw not in listed:
                scope.cancel()
                cancelled += 1
        return cancelled

    async def _attempt(self, attempt: Attempt) -> None:
        work = attempt.work
        try:
            payload = job.decode(work.raw, self.settings.max_payload_bytes)
        except UnparseablePayload as exc:
            log.error("unreadable job on queue %r moved to dead: %s", work.queue, exc)
            attempt.ran = True
            attempt.disposition = outcome.unparseable(work.raw, queue=work.queue,
                                                      reason=str(exc), now=time.time())
            self.stats.processed += 1
            self.stats.failed += 1
            return
        definition = self.registry.get(payload["class"])
        problem = self._check(definition, payload)
        if problem is not None or definition is None:
            attempt.ran = True
            attempt.error = problem
            self._failed(attempt, payload, problem or UnknownJob(), terminal=True)
            return
        try:
            await self._call(definition, payload)
        except (Exception, SystemExit) as exc:  # the job failed; the worker goes on
            attempt.ran, attempt.error = True, exc
            self._failed(attempt, payload, exc, terminal=False)
            return
        attempt.ran = True
        attempt.disposition = Ack()
        self.stats.processed += 1
        if log.isEnabledFor(logging.INFO):
            log.info("done: %s jid=%s in %.3fs", definition.name, payload["jid"],
                     time.monotonic() - attempt.started)

    def _check(self, definition: JobDefinition | None, payload: job.Payload) -> Exception | None:
        if definition is None:
            return UnknownJob(f"no job registered as {payload['class']!r}")
        try:
            definition.check_arguments(payload["args"], payload["kwargs"])
        except TypeError as exc:
            return InvalidArguments(str(exc))
        return None

    async def _call(self, definition: JobDefinition, payload: job.Payload) -> None:
        call = partial(definition.func, *payload["args"], **payload["kwargs"])
        if definition.is_async:
            await call()
        else:
            # A thread cannot be cancelled. Without abandon_on_cancel the cancel at the
            # shutdown deadline waited for the function to return: a long plain job held
            # the worker (and a second SIGTERM) for as long as it ran. Abandoned, its job
            # is given back like a cancelled async job (it never finished); the CLI then
            # exits without joining the thread (cli._leave_abandoned_threads).
            await anyio.to_thread.run_sync(call, limiter=self.limiter, abandon_on_cancel=True)

    def _failed(
        self, attempt: Attempt, payload: job.Payload, error: BaseException, *, terminal: bool
    ) -> None:
        self.stats.processed += 1
        self.stats.failed += 1
        filed = outcome.after_failure(payload, error, now=time.time(), policy=self.policy,
                                      terminal=terminal)
        attempt.disposition = filed
        log.warning("failed: %s jid=%s: %s: %s -> %s%s", payload["class"], payload["jid"],
                    type(error).__name__, error, filed.target,
                    f" in {filed.delay:.1f}s" if filed.target == "retry" else "")
