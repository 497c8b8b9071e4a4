"""One trace from a web request to the job's runs in a worker process.

The test process plays the web app (FastAPI, its SDK's in-memory exporter); the worker is
a real ``cogworker-async run`` process with an SDK of its own (tests/observe/tracedapp.py).
The only thing the two share is the payload in Redis: the trace crosses in it. The
request's SERVER span is FastAPI's own (it makes one whenever the OpenTelemetry API is
installed, child of the caller's ``traceparent`` header).
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
from fastapi import FastAPI
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.observe import tracedapp
from tests.observe.harness import Span, TracedWorker, consumer_of, finished, only


def ancestry(spans: list[Span], span: Span) -> list[Span]:
    """``span``'s parent, its parent's parent, ... as far as ``spans`` go."""
    by_id = {found["span_id"]: found for found in spans}
    chain: list[Span] = []
    while span["parent_id"] in by_id:
        span = by_id[span["parent_id"]]
        chain.append(span)
    return chain


async def test_a_request_that_enqueues_and_the_run_in_a_worker_process_are_one_trace(
    spans: InMemorySpanExporter, tracer: trace.Tracer,
    start_worker: Callable[..., TracedWorker], redis_url: str, namespace: str,
) -> None:
    jobs = tracedapp.build(redis_url, namespace)
    api = FastAPI()

    @api.post("/greet")
    async def greet(name: str) -> dict[str, str | None]:
        return {"jid": await jobs.greet.enqueue(name)}

    worker = start_worker()
    transport = httpx.ASGITransport(app=api)
    try:
        with tracer.start_as_current_span("caller", kind=trace.SpanKind.CLIENT):
            headers: dict[str, str] = {}
            propagate.inject(headers)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                response = await client.post("/greet", params={"name": "ada"}, headers=headers)
        assert response.status_code == 200
        jid = response.json()["jid"]
        [run] = await worker.spans(consumer_of("greet"), 1)
        await worker.process.stop()
    finally:
        await jobs.app.close()

    here = finished(spans)
    caller = only(here, name="caller")
    request = only(here, kind="SERVER", name="POST /greet")
    enqueue = only(here, kind="PRODUCER")
    # caller -> request (-> FastAPI's endpoint span) -> enqueue, in this process; then
    # the run in the worker process, a child of the enqueue: all one trace.
    assert caller["parent_id"] is None
    assert request["parent_id"] == caller["span_id"]
    assert request in ancestry(here, enqueue)
    assert ancestry(here, enqueue)[-1] == caller
    assert run["parent_id"] == enqueue["span_id"]
    assert {span["trace_id"] for span in (caller, request, enqueue, run)} == \
        {caller["trace_id"]}
    # Named and described by the messaging conventions.
    assert (enqueue["name"], run["name"]) == ("send default", "process default")
    assert enqueue["attributes"] == {
        "messaging.system": "cogworker", "messaging.operation.type": "send",
        "messaging.operation.name": "send", "messaging.destination.name": "default",
        "messaging.message.id": jid, "cogworker.job.name": "greet"}
    assert run["attributes"] == {
        "messaging.system": "cogworker", "messaging.operation.type": "process",
        "messaging.operation.name": "process", "messaging.destination.name": "default",
        "messaging.message.id": jid, "cogworker.job.name": "greet",
        "cogworker.job.attempt": 1, "cogworker.job.recovered": False}
    assert run["status"] == "UNSET"


async def test_a_failed_run_records_its_error_and_its_retry_is_another_run_of_the_trace(
    spans: InMemorySpanExporter, tracer: trace.Tracer,
    start_worker: Callable[..., TracedWorker], redis_url: str, namespace: str,
) -> None:
    jobs = tracedapp.build(redis_url, namespace)
    try:
        with tracer.start_as_current_span("caller"):
            jid = await jobs.flaky.enqueue()
    finally:
        await jobs.app.close()
    enqueue = only(finished(spans), kind="PRODUCER")

    worker = start_worker()
    runs = await worker.spans(consumer_of("flaky"), 2)
    await worker.process.stop()

    failed, retried = sorted(runs, key=lambda span: span["attributes"]["cogworker.job.attempt"])
    # Two runs, each a child of the one enqueue: the retry is not a new trace.
    for run in (failed, retried):
        assert run["trace_id"] == enqueue["trace_id"]
        assert run["parent_id"] == enqueue["span_id"]
        assert run["attributes"]["messaging.message.id"] == jid
    assert failed["span_id"] != retried["span_id"]
    assert [failed["attributes"]["cogworker.job.attempt"],
            retried["attributes"]["cogworker.job.attempt"]] == [1, 2]
    # The failure is on the first run's span: status, error type, the exception itself.
    assert failed["status"] == "ERROR"
    assert failed["attributes"]["error.type"] == "RuntimeError"
    [exception] = failed["events"]
    assert exception["name"] == "exception"
    assert exception["attributes"]["exception.type"] == "RuntimeError"
    assert exception["attributes"]["exception.message"] == "the first run fails"
    assert "flaky" in exception["attributes"]["exception.stacktrace"]
    assert (retried["status"], retried["events"]) == ("UNSET", [])
