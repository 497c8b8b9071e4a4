"""Tracing: OpenTelemetry spans around enqueues and runs, the trace context carried in
the payload from the one to the other.

The only module that imports ``opentelemetry``, and only once tracing is on:
``job_tracer`` tries the import when an App (its ``Client``) or a worker (its
``Executor``) is built. A process without the ``otel`` extra pays that one failed import
and nothing per job; with it, spans go wherever the application's SDK sends them (with
the API alone they are no-ops, and nothing is added to payloads).

The shape of a trace (the OpenTelemetry messaging conventions)::

    the caller's span (a web request, a script...)
      └─ send <queue>            PRODUCER, around the check and the push of an enqueue;
         │                       its context goes in the payload's ``trace`` field
         ├─ process <queue>      CONSUMER, one run in a worker process (maybe hours later)
         └─ process <queue>      CONSUMER, its retry: the same trace, the same parent

A job whose payload carries no context (a periodic tick, a job enqueued with tracing
off) starts a trace of its own: its run is a root span, never a child of whatever
context the worker's tasks inherited. A worker started inside a span (a lifespan run
under a request, a test) would otherwise adopt every job into that one trace.

Trust: a payload is data anyone who can write to Redis (or call ``enqueue`` with odd
options) may shape, so what comes back from it is checked, not obeyed. Only a W3C
``traceparent`` of the exact version-00 shape and a bounded ``tracestate`` are carried
(whatever propagators the application set globally); baggage only with
``Settings.tracing_baggage``. The payload's sampled flag is never obeyed: in the
default ``tracing_remote="parent"`` mode the run joins the enqueuer's trace, but whether
it is recorded is the worker's sampler's decision, asked as for a root; in ``"link"``
mode the run starts a trace of its own with a link to the enqueue. docs/tracing.md
("Trust") says what each choice lets a forged payload do.

``messaging.system`` is "cogworker": the conventions name the system as the client
instrumentation knows it, and the queue protocol here (reliable fetch, retries, dead,
schedules) is this package's own; Redis only stores it. That is what the Sidekiq
instrumentation does ("sidekiq", also on Redis), and "redis" would mix these spans up
with the Redis client's own spans (``db.system.name = "redis"``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from cogworker_async.errors import ConfigurationError, install_extra
from cogworker_async.settings import Settings, TracingRemote
from cogworker_async.version import __version__

if TYPE_CHECKING:
    from typing import TypeAlias

    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, SpanContext

    from cogworker_async.jobs.context import JobContext
    from cogworker_async.middleware import RunNext

    CallerContext: TypeAlias = Context
    """An enqueuing thread's trace context, as ``JobTracer.current`` hands it out."""

log = logging.getLogger(__name__)

PROVIDER_ENV: Final = "OTEL_PYTHON_TRACER_PROVIDER"
"""The API's environment variable naming a tracer provider to load."""
_MISSING: Final = object()

TRACE_FIELD: Final = "trace"
"""The payload field that carries the enqueue's trace context, as W3C headers:
``{"traceparent": "00-<trace id>-<span id>-01", "tracestate": ...}`` (and ``baggage``
with ``tracing_baggage``). Absent when there is nothing to carry."""
TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
BAGGAGE: Final = "baggage"
TRACEPARENT_SHAPE: Final = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-"
                                      r"[0-9a-f]{2}")
"""A version-00 traceparent, ids not all zeros (fullmatch; anything else is dropped)."""
MAX_TRACESTATE_CHARS: Final = 512
"""W3C's bound on what a tracestate must be able to hold; a longer one is dropped."""
MAX_BAGGAGE_CHARS: Final = 8192
"""W3C's baggage bound; a longer one is dropped."""


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """What a tracer carries in and takes from payloads (``Settings.tracing_*``)."""

    baggage: bool = False
    remote: TracingRemote = "parent"

    @classmethod
    def of(cls, settings: Settings) -> TraceOptions:
        return cls(settings.tracing_baggage, settings.tracing_remote)

INSTRUMENTATION: Final = "cogworker_async"
"""The instrumentation scope (the tracer's name)."""

SYSTEM: Final = "cogworker"
"""``messaging.system`` (see the module docstring for why not "redis")."""

# Attribute names: the messaging conventions' current ones (``messaging.operation.type``
# has replaced ``messaging.operation``), then this package's own.
MESSAGING_SYSTEM: Final = "messaging.system"
OPERATION_TYPE: Final = "messaging.operation.type"
OPERATION_NAME: Final = "messaging.operation.name"
DESTINATION: Final = "messaging.destination.name"
MESSAGE_ID: Final = "messaging.message.id"
BATCH_COUNT: Final = "messaging.batch.message_count"
ERROR_TYPE: Final = "error.type"
JOB_NAME: Final = "cogworker.job.name"
"""The registered job name (the payload's ``class``)."""
JOB_ATTEMPT: Final = "cogworker.job.attempt"
"""1 on the first run, 2 on the first retry, ..."""
JOB_RECOVERED: Final = "cogworker.job.recovered"
"""The job was once taken back from a process that died running it."""
ENQUEUE_REFUSED: Final = "cogworker.enqueue.refused"
"""Nothing was pushed: a unique job's duplicate, or a client middleware said no."""

SEND: Final = "send"
PROCESS: Final = "process"

MISSING_EXTRA: Final = (f"tracing=True needs opentelemetry-api: {install_extra('otel')}; "
                        "or leave tracing unset")


def job_tracer(setting: bool | None, options: TraceOptions | None = None
               ) -> JobTracer | None:
    """The tracer for ``Settings.tracing``: None when tracing is off (False, or None
    without opentelemetry-api); ConfigurationError when it is True and the API is
    missing. Called once per App and once per worker, never per job."""
    if setting is False:
        return None
    try:
        return JobTracer(options or TraceOptions())
    except ImportError:
        if setting:
            raise ConfigurationError(MISSING_EXTRA) from None
        return None


class JobTracer:
    """Makes the spans of one App's enqueues, or of one worker's runs.

    Its tracer is taken from the global provider once, when it is built: before the
    application sets its provider, the API hands out a proxy that follows it later.
    """

    def __init__(self, options: TraceOptions | None = None) -> None:
        from opentelemetry import context, trace  # ImportError: no extra
        from opentelemetry.baggage.propagation import W3CBaggagePropagator
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )

        self.options = options or TraceOptions()

        self._tracer = trace.get_tracer(INSTRUMENTATION, __version__)
        self._invalid = trace.INVALID_SPAN
        self._trace = trace
        self._unset = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        self._seen: object = None
        self._seen_active = False
        # With the provider named by an environment variable, the API makes it on the
        # first get_tracer_provider(): ask that way then (slower: an os.environ lookup).
        self._by_env = PROVIDER_ENV in os.environ
        self._producer, self._consumer = trace.SpanKind.PRODUCER, trace.SpanKind.CONSUMER
        self._status, self._error = trace.Status, trace.StatusCode.ERROR
        self._in_context, self._current_span = trace.set_span_in_context, trace.get_current_span
        self._attach, self._detach, self._current = (context.attach, context.detach,
                                                     context.get_current)
        # W3C's own propagators, not the global ones: what a payload carries is fixed
        # (see "Trust" above), whatever the application propagates over HTTP.
        self._context_format = TraceContextTextMapPropagator()
        self._baggage_format = W3CBaggagePropagator() if self.options.baggage else None
        self._span_context, self._link = trace.SpanContext, trace.Link
        self._sampled, self._not_sampled = (trace.TraceFlags(trace.TraceFlags.SAMPLED),
                                            trace.TraceFlags(trace.TraceFlags.DEFAULT))
        self._non_recording = trace.NonRecordingSpan
        self._empty = context.Context()

    def active(self) -> bool:
        """Whether the application has set a tracer provider (an SDK) yet. Asked per
        enqueue and per run: with the API alone (installed by some other package, say)
        every span would be a no-op that still costs microseconds, so none is made and
        nothing is put in the payload. ``get_tracer_provider()`` costs an ``os.environ``
        lookup per call (measured: a few percent of a no-op job), so the API's global is
        read directly, with the public call as the fallback."""
        trace = self._trace
        provider = getattr(trace, "_TRACER_PROVIDER", _MISSING)
        if provider is None and not self._by_env:
            return False
        if provider is _MISSING or provider is None:  # another API version; the env var
            provider = trace.get_tracer_provider()
        if provider is not self._seen:
            self._seen, self._seen_active = provider, not isinstance(provider, self._unset)
        return self._seen_active

    # -- enqueue side -----------------------------------------------------------------

    @contextmanager
    def sending(self, name: str, queue: str, *, count: int | None = None) -> Iterator[Span]:
        """A PRODUCER span around one enqueue (``count``: a batch's), current inside the
        block, so that ``inject`` puts it in the payload and a client middleware's own
        spans are its children. What the block raises is recorded on it."""
        attributes: dict[str, str | int] = {
            MESSAGING_SYSTEM: SYSTEM, OPERATION_TYPE: SEND, OPERATION_NAME: SEND,
            DESTINATION: queue, JOB_NAME: name}
        if count is not None:
            attributes[BATCH_COUNT] = count
        try:
            span = self._tracer.start_span(f"{SEND} {queue}", kind=self._producer,
                                           attributes=attributes)
        except Exception:  # the SDK's sampler or processors: the enqueue goes untraced
            log.warning("starting a span failed: the enqueue goes untraced", exc_info=True)
            span = self._invalid
        token = self._attach(self._in_context(span))
        try:
            yield span
        except BaseException as exc:
            self._failed(span, exc)
            raise
        finally:
            self._detach(token)
            _end(span)

    @staticmethod
    def sent(span: Span, jid: str | None) -> None:
        """Note what one enqueue came to: its jid, or that nothing was pushed."""
        if jid is None:
            span.set_attribute(ENQUEUE_REFUSED, True)
        else:
            span.set_attribute(MESSAGE_ID, jid)

    def inject(self, payload: MutableMapping[str, Any]) -> None:
        """Put the current trace context in the payload; nothing without a valid span
        (the API without an SDK, and no context from upstream), at no further cost."""
        if not self._current_span().get_span_context().is_valid:
            return
        carrier: dict[str, str] = {}
        self._context_format.inject(carrier)
        if self._baggage_format is not None:  # asked for: the enqueuer's is stored
            self._baggage_format.inject(carrier)
        if carrier:
            payload[TRACE_FIELD] = carrier

    def current(self) -> CallerContext:
        """The caller's context, for an enqueue made on another thread (``enqueue_sync``
        runs on a private event loop, which does not see the caller's context)."""
        return self._current()

    @contextmanager
    def within(self, context: CallerContext) -> Iterator[None]:
        """Make ``context`` (from ``current``) the current one inside the block."""
        token = self._attach(context)
        try:
            yield
        finally:
            self._detach(token)

    # -- worker side ------------------------------------------------------------------

    async def around_run(self, job: JobContext, call_next: RunNext) -> None:
        """Built-in server middleware (outermost): a CONSUMER span around one run, child
        of the enqueue's span, current while the job runs (so the job's own spans, and
        its enqueues, are its children)."""
        name = f"{PROCESS} {job.queue}"
        attributes: dict[str, str | int] = {
            MESSAGING_SYSTEM: SYSTEM, OPERATION_TYPE: PROCESS, OPERATION_NAME: PROCESS,
            DESTINATION: job.queue, MESSAGE_ID: job.jid, JOB_NAME: job.name,
            JOB_ATTEMPT: job.attempt}
        try:
            parent, links = self._parent(job.payload, name, attributes)
            span = self._tracer.start_span(name, context=parent, kind=self._consumer,
                                           attributes=attributes, links=links)
        except Exception:  # the SDK's sampler or processors: the job runs untraced
            log.warning("starting a span failed: jid=%s runs untraced", job.jid,
                        exc_info=True)
            await call_next(job)
            return
        token = self._attach(self._in_context(span, parent))
        try:
            if span.is_recording():  # a Redis call: only for a span that is kept
                await self._mark_recovered(span, job)
            await call_next(job)
        except BaseException as exc:
            self._failed(span, exc)
            raise
        finally:
            self._detach(token)
            _end(span)

    def _parent(self, payload: Mapping[str, Any], name: str,
                attributes: Mapping[str, str | int]) -> tuple[Context, list[Link]]:
        """The run's parent context and links, from the payload's checked headers on an
        empty base: without a usable context the run starts a trace of its own."""
        headers = _headers(payload.get(TRACE_FIELD), baggage=self.options.baggage)
        if TRACEPARENT not in headers:
            return self._empty, []
        try:
            extracted = self._context_format.extract(headers, context=self._empty)
            if self._baggage_format is not None:
                extracted = self._baggage_format.extract(headers, context=extracted)
        except Exception:  # a propagator's bug: never a reason to fail a run
            log.debug("jid=%s: its trace context could not be read", payload.get("jid"),
                      exc_info=True)
            return self._empty, []
        remote = self._current_span(extracted).get_span_context()
        if not remote.is_valid:
            return self._empty, []
        if self.options.remote == "link":
            # Baggage (asked for) still reaches the job; the trace is the worker's own.
            base = extracted if self._baggage_format is not None else self._empty
            return self._in_context(self._invalid, base), [self._link(remote)]
        decided = self._span_context(remote.trace_id, remote.span_id, is_remote=True,
                                     trace_flags=self._decide(remote, name, attributes),
                                     trace_state=remote.trace_state)
        return self._in_context(self._non_recording(decided), extracted), []

    def _decide(self, remote: SpanContext, name: str,
                attributes: Mapping[str, str | int]) -> Any:
        """The sampled flag of a run in a remote trace: the worker's sampler's answer for
        a root span of that trace (the SDK's provider has one), never the payload's; not
        sampled with a provider that has no sampler to ask."""
        sampler = getattr(self._trace.get_tracer_provider(), "sampler", None)
        try:
            result = sampler.should_sample(None, remote.trace_id, name, self._consumer,
                                           attributes) if sampler is not None else None
            sampled = bool(result is not None and result.decision.is_sampled())
        except Exception:  # a custom sampler's bug: the run goes unrecorded
            log.debug("the sampler failed on a run", exc_info=True)
            sampled = False
        return self._sampled if sampled else self._not_sampled

    @staticmethod
    async def _mark_recovered(span: Span, job: JobContext) -> None:
        try:
            recovered = await job.was_recovered()
        except Exception:  # a Redis error: the attribute is never worth a failed run
            log.debug("jid=%s: could not tell whether it was recovered", job.jid,
                      exc_info=True)
            return
        span.set_attribute(JOB_RECOVERED, recovered)

    def _failed(self, span: Span, exc: BaseException) -> None:
        """Record a failure. A cancellation (a shutdown's, a caller's) is no failure of
        the job: the span just ends (a cancelled run is given back and runs again)."""
        if not span.is_recording() or not isinstance(exc, Exception | SystemExit):
            return
        span.record_exception(exc)
        span.set_attribute(ERROR_TYPE, error_type(exc))
        span.set_status(self._status(self._error, f"{type(exc).__name__}: {exc}"))


def _headers(carrier: object, *, baggage: bool) -> dict[str, str]:
    """The W3C headers of a payload's trace field that are carried: a traceparent of the
    exact shape, a bounded tracestate with it, and baggage only when asked for."""
    if not isinstance(carrier, dict):
        return {}
    parent = carrier.get(TRACEPARENT)
    if not isinstance(parent, str) or not TRACEPARENT_SHAPE.fullmatch(parent):
        return {}
    headers = {TRACEPARENT: parent}
    state = carrier.get(TRACESTATE)
    if isinstance(state, str) and len(state) <= MAX_TRACESTATE_CHARS:
        headers[TRACESTATE] = state
    found = carrier.get(BAGGAGE)
    if baggage and isinstance(found, str) and len(found) <= MAX_BAGGAGE_CHARS:
        headers[BAGGAGE] = found
    return headers


def error_type(exc: BaseException) -> str:
    """``error.type`` of an exception: its fully qualified class name (a built-in's
    bare name)."""
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"


def _end(span: Span) -> None:
    """End a span; the SDK's span processors run here, unguarded: one that raises must
    never fail a run that succeeded (it would run again) or an enqueue that was pushed
    (the caller would push it again)."""
    try:
        span.end()
    except Exception:
        log.warning("ending a span failed (a span processor raised)", exc_info=True)
