"""The worker side, in this process: where a run's span takes its parent from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cogworker_async import App
from cogworker_async.redis.store import Store
from tests.observe.harness import consumer_of, finished, only
from tests.waiting import wait_until


async def test_a_periodic_run_starts_its_own_trace_even_in_a_worker_started_under_a_span(
    spans: InMemorySpanExporter, tracer: trace.Tracer, make_app: Callable[..., App],
) -> None:
    """A worker in a lifespan that runs under a span: its tasks inherit that context, and
    a periodic tick's payload carries none. Its run must be a root, not a child of it."""
    jobs = make_app()
    ticks: list[int] = []

    @jobs.periodic("* * * * * *", name="tick")
    async def tick() -> None:
        ticks.append(1)

    with tracer.start_as_current_span("lifespan"):
        async with jobs.worker():
            await wait_until(lambda: any(map(consumer_of("tick"), finished(spans))),
                             timeout=10)
    lifespan = only(finished(spans), name="lifespan")
    run = next(span for span in finished(spans) if consumer_of("tick")(span))
    assert run["parent_id"] is None
    assert run["trace_id"] != lifespan["trace_id"]
    assert run["name"] == "process default"
    assert run["attributes"]["cogworker.job.attempt"] == 1
    assert [span["name"] for span in finished(spans) if span["kind"] == "PRODUCER"] == []


async def test_a_recovered_job_says_so_on_its_runs_span(
    spans: InMemorySpanExporter, make_app: Callable[..., App], store: Store,
) -> None:
    jobs = make_app()
    ran = anyio.Event()

    @jobs.job(name="ping")
    async def ping() -> None:
        ran.set()

    jid = await ping.enqueue()
    assert jid is not None
    # What recovery leaves when it takes a job back from a dead process.
    await store.client.set(store.keys.orphanings("default", jid), 1)
    async with jobs.worker():
        with anyio.fail_after(10):
            await ran.wait()
    run = only(finished(spans), kind="CONSUMER")
    assert run["attributes"]["cogworker.job.recovered"] is True
    assert run["attributes"]["messaging.message.id"] == jid


class _Raising:
    """A span processor that raises when a span ends (a buggy exporter, say)."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: Any) -> None:
        raise RuntimeError("the exporter is broken")

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


async def test_a_span_processor_that_raises_fails_neither_the_run_nor_the_enqueue(
    make_app: Callable[..., App], store: Store, spans: InMemorySpanExporter,
) -> None:
    """Ending a span runs the SDK's processors: one that raises must not fail a run that
    succeeded (it would be retried: run twice) nor an enqueue that was pushed."""
    trace.get_tracer_provider().add_span_processor(_Raising())  # type: ignore[attr-defined]
    jobs = make_app()
    ran: list[int] = []

    @jobs.job(name="fine")
    async def fine(n: int) -> None:
        ran.append(n)

    jid = await fine.enqueue(1)  # no exception: the push happened
    assert jid is not None
    async with jobs.worker():
        await wait_until(lambda: ran == [1], timeout=5)
    assert ran == [1]
    assert await store.client.zcard(store.keys.retry("default")) == 0
    assert await store.client.zcard(store.keys.dead("default")) == 0
