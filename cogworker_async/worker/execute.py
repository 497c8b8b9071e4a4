"""Execute: run one job's function — in its context, through the server middleware, with
its timeout, in a thread if it is a plain function.

A timed-out async job is cancelled. A plain function cannot be: its thread runs on, so
the job is filed as a ``JobTimeout`` failure at once, but its slot stays busy until the
thread returns (``Leftover.thread_done``) — the docs say so, rather than pretend.

The chain, outermost first: the tracing span (when tracing is on: ``observe/tracing.py``), the
counts, the App's server middleware, the job. The span is outermost so that it times and
records whatever the rest raises.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import anyio

from cogworker_async.errors import JobTimeout
from cogworker_async.jobs import wire as payloads
from cogworker_async.jobs.context import CURRENT, NO_CONTROL, JobContext, RunControl
from cogworker_async.jobs.definition import MAX_TIMEOUT, JobDefinition
from cogworker_async.jobs.retries import attempt_of
from cogworker_async.middleware import ServerMiddleware, server_chain
from cogworker_async.observe.tracing import TraceOptions, job_tracer

_this_run: ContextVar[tuple[JobDefinition, payloads.Payload, Leftover]] = ContextVar(
    "cogworker_this_run")


@dataclass(slots=True)
class Counters:
    """Processed/failed totals, kept in memory, flushed to Redis by the Manager."""

    processed: int = 0
    failed: int = 0

    async def middleware(self, job: JobContext, call_next: Callable[[JobContext],
                                                                   Awaitable[None]]) -> None:
        """The built-in server middleware that counts runs (outermost but for the
        tracing span)."""
        try:
            await call_next(job)
        except BaseException:
            self.processed += 1
            self.failed += 1
            raise
        self.processed += 1


@dataclass(slots=True)
class Leftover:
    """What a run may leave behind: a plain function's thread that outlived it."""

    thread_done: anyio.Event | None = field(default=None)
    """Set when a timed-out plain function's thread finally returns (its slot is busy
    until then)."""
    result: Any = None
    """What the job function returned (kept when the job keeps its result)."""


class Executor:
    def __init__(
        self,
        counters: Counters,
        middleware: Sequence[ServerMiddleware],
        limiter: anyio.CapacityLimiter,
        orphanings: Callable[[str, str], Awaitable[int]],
        *,
        tracing: bool | None = None,
        trace_options: TraceOptions | None = None,
    ) -> None:
        """``tracing``: ``Settings.tracing`` (the one import check for this worker);
        ``trace_options``: the other ``tracing_*`` settings."""
        self.counters = counters
        self.middleware = list(middleware)
        self.limiter = limiter
        self.orphanings = orphanings
        self._tracer = job_tracer(tracing, trace_options)
        # The chains are built once, not per run; each run finds its own parts in a
        # context variable (per task: concurrent runs never see each other's).
        self._chain = server_chain([counters.middleware, *self.middleware], self._innermost)
        self._traced_chain = self._chain if self._tracer is None else server_chain(
            [self._tracer.around_run, counters.middleware, *self.middleware], self._innermost)

    def context(self, definition: JobDefinition, payload: payloads.Payload,
                queue: str, control: RunControl | None = None) -> JobContext:
        jid = str(payload["jid"])
        return JobContext(
            jid=jid, name=definition.name, queue=queue, attempt=attempt_of(payload),
            enqueued_at=payloads.number(payload, "enqueued_at"),
            created_at=payloads.number(payload, "created_at"),
            # The job sees a plain dict: middleware may have added fields of its own.
            # (A string type: no alias is built per job.)
            payload=cast("dict[str, Any]", payload),
            _orphanings=partial(self.orphanings, queue, jid),
            _control=control if control is not None else NO_CONTROL,
        )

    async def run(self, definition: JobDefinition, payload: payloads.Payload, queue: str,
                  leftover: Leftover, control: RunControl | None = None) -> None:
        """Run the job; raises whatever the job (or a middleware) raised. What it
        returned is in ``leftover.result``."""
        context = self.context(definition, payload, queue, control)
        token = CURRENT.set(context)
        tracer = self._tracer
        traced = tracer is not None and tracer.active()
        if not traced and not self.middleware:
            # No layer to pass through (most jobs): the counts kept here, as the counting
            # middleware would, and the job called without a chain of closures.
            counters = self.counters
            try:
                await self._call(definition, payload, leftover)
            except BaseException:
                counters.processed += 1
                counters.failed += 1
                raise
            finally:
                CURRENT.reset(token)
            counters.processed += 1
            return
        parts = _this_run.set((definition, payload, leftover))
        chain = self._traced_chain if traced else self._chain
        try:
            await chain(context)
        finally:
            _this_run.reset(parts)
            CURRENT.reset(token)

    async def _innermost(self, job: JobContext) -> None:
        definition, payload, leftover = _this_run.get()
        await self._call(definition, payload, leftover)

    async def _call(self, definition: JobDefinition, payload: payloads.Payload,
                    leftover: Leftover) -> None:
        call = partial(definition.func, *payload["args"], **payload["kwargs"])
        timeout = payloads.timeout_of(payload, definition.options.timeout, MAX_TIMEOUT)
        if definition.is_async:
            if timeout is None:
                leftover.result = await call()
                return
            try:
                with anyio.fail_after(timeout):
                    leftover.result = await call()
            except TimeoutError:
                raise JobTimeout(f"{definition.name} ran over its timeout of {timeout}s") \
                    from None
            return
        done = anyio.Event()
        leftover.thread_done = done

        def in_thread() -> Any:
            try:
                return call()
            finally:
                anyio.from_thread.run_sync(done.set)

        # A thread cannot be cancelled: abandoned at a timeout or a shutdown's deadline,
        # it runs on; its slot is held until ``done`` (see the module docstring).
        with anyio.move_on_after(timeout) as scope:
            leftover.result = await anyio.to_thread.run_sync(
                in_thread, limiter=self.limiter, abandon_on_cancel=True)
        if scope.cancelled_caught:
            raise JobTimeout(f"{definition.name} ran over its timeout of {timeout}s (it is "
                             "a plain function: its thread runs on until it returns)")
        leftover.thread_done = None
