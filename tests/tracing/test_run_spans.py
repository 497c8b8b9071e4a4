"""The worker side, in this process: where a run's span takes its parent from."""

from __future__ import annotations

from collections.abc import Callable

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cogworker_async import App
from cogworker_async.redis.store import Store
from tests.tracing.harness import consumer_of, finished, only
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
