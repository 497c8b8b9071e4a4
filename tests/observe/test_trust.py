"""The trust boundary of the trace context in payloads: a forged ``trace`` field can
neither force a run to be recorded nor smuggle baggage into the job, malformed headers
are dropped, and the enqueuer's baggage is not stored unless asked for."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import anyio
import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler
from opentelemetry.util._once import Once

from cogworker_async import App
from cogworker_async.middleware import Enqueue, EnqueueNext
from tests.observe.harness import consumer_of, finished

TRACE_ID: Final = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID: Final = "00f067aa0ba902b7"
FORGED_SAMPLED: Final = {"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-01",
                         "baggage": "session=stolen,email=a%40b.example"}


@contextmanager
def provider(sampler: Sampler) -> Iterator[InMemorySpanExporter]:
    """A global SDK provider with ``sampler`` for the block (as conftest's ``spans``)."""
    exporter = InMemorySpanExporter()
    sdk = TracerProvider(sampler=sampler)
    sdk.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(sdk)
    try:
        yield exporter
    finally:
        sdk.shutdown()
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None


def forging(carrier: Any) -> Callable[[Enqueue, EnqueueNext], Any]:
    """A client middleware that stores ``carrier`` as the payload's trace field (what
    anyone who can write a payload to Redis can do)."""
    async def forge(enqueue: Enqueue, call_next: EnqueueNext) -> str | None:
        enqueue.payload["trace"] = carrier
        return await call_next(enqueue)

    return forge


async def run_one(jobs: App, seen: list[dict[str, Any]]) -> None:
    """Enqueue a ``look`` job and run it in a worker; ``seen`` gets what it saw."""
    ran = anyio.Event()

    @jobs.job(name="look")
    async def look() -> None:
        current = trace.get_current_span().get_span_context()
        seen.append({"baggage": dict(baggage.get_all()),
                     "trace_id": f"{current.trace_id:032x}"})
        ran.set()

    assert await look.enqueue() is not None
    async with jobs.worker():
        with anyio.fail_after(10):
            await ran.wait()


async def test_a_forged_sampled_flag_does_not_make_the_worker_record_a_run(
    make_app: Callable[..., App],
) -> None:
    # The worker samples nothing of its own; the payload says "sampled".
    with provider(ParentBased(ALWAYS_OFF)) as spans:
        jobs = make_app()
        jobs.add_client_middleware(forging(FORGED_SAMPLED))
        seen: list[dict[str, Any]] = []
        await run_one(jobs, seen)
        assert [span for span in finished(spans) if consumer_of("look")(span)] == []
    assert seen[0]["baggage"] == {}  # and no baggage reached the job


async def test_a_valid_remote_parent_is_kept_and_the_worker_decides_sampling(
    make_app: Callable[..., App],
) -> None:
    not_sampled = {"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-00", "tracestate": "v=1"}
    with provider(ParentBased(ALWAYS_ON)) as spans:
        jobs = make_app()
        jobs.add_client_middleware(forging(not_sampled))
        await run_one(jobs, [])
        runs = [span for span in finished(spans) if consumer_of("look")(span)]
    assert len(runs) == 1  # the worker's sampler says yes, whatever the flag
    assert (runs[0]["trace_id"], runs[0]["parent_id"]) == (TRACE_ID, SPAN_ID)


@pytest.mark.parametrize("carrier", [
    {"traceparent": f"00-{TRACE_ID.upper()}-{SPAN_ID}-01"},
    {"traceparent": f"01-{TRACE_ID}-{SPAN_ID}-01-extra"},
    {"traceparent": f" 00-{TRACE_ID}-{SPAN_ID}-01"},
    {"traceparent": f"00-{'0' * 32}-{SPAN_ID}-01"},
    {"traceparent": ["not", "text"]},
    "00-not-a-dict",
])
async def test_a_malformed_traceparent_is_dropped_and_the_run_is_a_root(
    make_app: Callable[..., App], carrier: Any,
) -> None:
    with provider(ParentBased(ALWAYS_ON)) as spans:
        jobs = make_app()
        jobs.add_client_middleware(forging(carrier))
        await run_one(jobs, [])
        runs = [span for span in finished(spans) if consumer_of("look")(span)]
    assert len(runs) == 1
    assert runs[0]["parent_id"] is None
    assert runs[0]["trace_id"] != TRACE_ID


async def test_link_mode_starts_a_trace_of_its_own_linked_to_the_enqueue(
    make_app: Callable[..., App],
) -> None:
    with provider(ParentBased(ALWAYS_ON)) as spans:
        jobs = make_app(tracing_remote="link")
        jobs.add_client_middleware(forging(FORGED_SAMPLED))
        await run_one(jobs, [])
        runs = [span for span in spans.get_finished_spans()
                if span.kind == trace.SpanKind.CONSUMER]
    assert len(runs) == 1
    assert runs[0].parent is None
    assert [f"{link.context.trace_id:032x}" for link in runs[0].links] == [TRACE_ID]


async def test_baggage_is_carried_only_when_asked_for(make_app: Callable[..., App]) -> None:
    for asked, expected in ((False, {}), (True, {"tenant": "t1"})):
        with provider(ParentBased(ALWAYS_ON)):
            jobs = make_app(tracing_baggage=asked)
            stored: list[dict[str, Any]] = []

            async def keep(enqueue: Enqueue, call_next: EnqueueNext,
                           stored: list[dict[str, Any]] = stored) -> str | None:
                stored.append(dict(enqueue.payload.get("trace", {})))
                return await call_next(enqueue)

            jobs.add_client_middleware(keep)
            seen: list[dict[str, Any]] = []
            token = context.attach(baggage.set_baggage("tenant", "t1"))
            try:
                with trace.get_tracer("tests").start_as_current_span("request"):
                    await run_one(jobs, seen)
            finally:
                context.detach(token)
        assert ("baggage" in stored[0]) is asked  # not even stored in Redis when off
        assert "traceparent" in stored[0]
        assert seen[0]["baggage"] == expected


def test_the_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="tracing_remote"):
        App("redis://127.0.0.1:1", tracing_remote="child")
    with pytest.raises(TypeError, match="tracing_baggage"):
        App("redis://127.0.0.1:1", tracing_baggage="yes")
