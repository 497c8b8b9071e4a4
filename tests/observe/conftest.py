"""Tracing tests: an OpenTelemetry SDK in the test process, worker processes with theirs.

``spans`` sets an SDK provider with an in-memory exporter as the global one for the
test, and takes it back afterwards (the API lets a process set its provider only once:
the reset is what the OpenTelemetry project's own test helpers do), so that no other
test runs with spans recorded. ``start_worker(**settings)`` runs tests/observe/tracedapp.py
in a ``cogworker-async run`` process that writes its spans to a file of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from tests.observe import tracedapp
from tests.observe.harness import TARGET, TracedWorker
from tests.workerproc import WorkerProcess, worker_pool


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The test process's finished spans (its global provider, for this test only)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None


@pytest.fixture
def tracer(spans: InMemorySpanExporter) -> trace.Tracer:
    """The test's own tracer (for the caller's spans around an enqueue)."""
    return trace.get_tracer("tests.observe")


@pytest.fixture
def start_worker(redis_url: str, namespace: str,
                 tmp_path: Path) -> Iterator[Callable[..., TracedWorker]]:
    """``start_worker(**settings)``: a running worker process writing its spans to a file
    (killed by pid at teardown if the test did not stop it; its log printed)."""
    with worker_pool() as workers:
        def start(**settings: Any) -> TracedWorker:
            path = tmp_path / f"spans-{len(workers)}.jsonl"
            process = WorkerProcess(redis_url, namespace, settings, [], target=TARGET,
                                    env={tracedapp.SPANS_ENV: str(path)})
            workers.append(process)
            return TracedWorker(process.start(), path)
        yield start
