"""The enqueue side: a PRODUCER span per enqueue path, its context in the payload."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import redis.exceptions
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cogworker_async import App
from cogworker_async.redis.store import Store
from tests.observe.harness import finished, only
from tests.servers import free_port


async def queued(store: Store, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in await store.client.lrange(store.keys.queue(queue), 0, -1)]


def parent_of(payload: dict[str, Any]) -> tuple[str, str]:
    """(trace id, span id) of the sampled parent the payload's W3C ``traceparent`` names
    (nothing else in the field: the default propagators, and no baggage)."""
    assert set(payload["trace"]) == {"traceparent"}
    version, trace_id, span_id, flags = payload["trace"]["traceparent"].split("-")
    assert version == "00"
    assert int(flags, 16) & 1  # sampled
    return trace_id, span_id


def ids(span: dict[str, Any]) -> tuple[str, str]:
    return span["trace_id"], span["span_id"]


async def test_an_enqueue_is_a_producer_span_whose_context_the_payload_carries(
    spans: InMemorySpanExporter, tracer: trace.Tracer, make_app: Callable[..., App],
    store: Store,
) -> None:
    jobs = make_app()

    @jobs.job(name="ping")
    async def ping(n: int) -> None: ...

    with tracer.start_as_current_span("caller"):
        jid = await ping.enqueue(1)
    caller = only(finished(spans), name="caller")
    enqueue = only(finished(spans), kind="PRODUCER")
    assert enqueue["parent_id"] == caller["span_id"]
    assert enqueue["attributes"]["messaging.message.id"] == jid
    [payload] = await queued(store)
    assert parent_of(payload) == ids(enqueue)


async def test_scheduled_and_batch_enqueues_are_traced_too(
    spans: InMemorySpanExporter, make_app: Callable[..., App], store: Store,
) -> None:
    jobs = make_app()

    @jobs.job(name="ping")
    async def ping(n: int) -> None: ...

    scheduled = await ping.enqueue_in(60, 1)
    batch = await ping.enqueue_many([([n], {}) for n in range(3)])
    later, many = sorted((s for s in finished(spans) if s["kind"] == "PRODUCER"),
                         key=lambda s: "messaging.batch.message_count" in s["attributes"])
    # The scheduled job waits in the schedule with its enqueue's context.
    [(raw, _)] = await store.client.zrange(store.keys.schedule("default"), 0, -1,
                                           withscores=True)
    assert parent_of(json.loads(raw)) == ids(later)
    assert later["attributes"]["messaging.message.id"] == scheduled
    # A batch is one span (no single message id), whose context each of its jobs carries.
    assert many["attributes"]["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in many["attributes"]
    payloads = await queued(store)
    assert {p["jid"] for p in payloads} == set(batch)
    assert all(parent_of(p) == ids(many) for p in payloads)


async def test_enqueue_sync_is_a_child_of_the_calling_threads_span(
    spans: InMemorySpanExporter, tracer: trace.Tracer, make_app: Callable[..., App],
    store: Store,
) -> None:
    """``enqueue_sync`` pushes from a private event loop thread, which does not see the
    caller's context: a sync web framework's request span must still be the parent."""
    jobs = make_app()

    @jobs.job(name="ping")
    async def ping(n: int) -> None: ...

    def sync_caller() -> str | None:
        with tracer.start_as_current_span("sync caller"):
            return ping.enqueue_sync(1)

    jid = await anyio.to_thread.run_sync(sync_caller)
    caller = only(finished(spans), name="sync caller")
    enqueue = only(finished(spans), kind="PRODUCER")
    assert enqueue["parent_id"] == caller["span_id"]
    assert enqueue["trace_id"] == caller["trace_id"]
    assert enqueue["attributes"]["messaging.message.id"] == jid
    [payload] = await queued(store)
    assert parent_of(payload) == ids(enqueue)


async def test_a_push_that_fails_is_recorded_on_its_span(
    spans: InMemorySpanExporter, namespace: str,
) -> None:
    jobs = App(f"redis://127.0.0.1:{free_port()}", namespace=namespace)  # nothing listens

    @jobs.job(name="ping")
    async def ping(n: int) -> None: ...

    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            await ping.enqueue(1)
    finally:
        await jobs.close()
    enqueue = only(finished(spans), kind="PRODUCER")
    assert enqueue["status"] == "ERROR"
    # What the caller saw: ours, which names the URL (a redis-py ConnectionError still).
    assert enqueue["attributes"]["error.type"] == \
        "cogworker_async.redis.unreachable.RedisUnreachable"
    assert [event["name"] for event in enqueue["events"]] == ["exception"]
    assert "messaging.message.id" not in enqueue["attributes"]


async def test_a_refused_enqueue_says_so_on_its_span(
    spans: InMemorySpanExporter, make_app: Callable[..., App],
) -> None:
    jobs = make_app()

    @jobs.job(name="once", unique=True)
    async def once() -> None: ...

    assert await once.enqueue() is not None
    assert await once.enqueue() is None  # a duplicate: nothing pushed
    first, duplicate = [s for s in finished(spans) if s["kind"] == "PRODUCER"]
    assert "cogworker.enqueue.refused" not in first["attributes"]
    assert duplicate["attributes"]["cogworker.enqueue.refused"] is True
    assert "messaging.message.id" not in duplicate["attributes"]


async def test_with_the_api_alone_no_field_is_added(make_app: Callable[..., App],
                                                   store: Store) -> None:
    """No SDK configured (this test sets none): the spans are no-ops, and a payload
    carries nothing it does not need."""
    jobs = make_app()

    @jobs.job(name="ping")
    async def ping(n: int) -> None: ...

    await ping.enqueue(1)
    [payload] = await queued(store)
    assert "trace" not in payload


async def test_tracing_off_makes_no_span_and_adds_no_field(
    spans: InMemorySpanExporter, tracer: trace.Tracer, make_app: Callable[..., App],
    store: Store,
) -> None:
    jobs = make_app(tracing=False)
    ran = anyio.Event()

    @jobs.job(name="ping")
    async def ping(n: int) -> None:
        ran.set()

    with tracer.start_as_current_span("caller"):
        await ping.enqueue(1)
    [payload] = await queued(store)
    assert "trace" not in payload
    async with jobs.worker():  # the worker's own setting: off too
        with anyio.fail_after(10):
            await ran.wait()
    assert [span["name"] for span in finished(spans)] == ["caller"]
