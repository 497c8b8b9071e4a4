"""The job app of the tracing tests, and the worker process that runs it:

    cogworker-async run tests.observe.tracedapp:jobs      (cwd: the repository root)

In the worker process (configured from the environment like tests/worker/e2e/jobsapp.py, plus
``TRACING_SPANS_FILE``) this module sets up the process's own OpenTelemetry SDK, as an
application would: every span that ends is written at once, one JSON line, to that file,
which the test reads. The test process builds the same App with ``build`` to enqueue.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from cogworker_async import App, current_job
from cogworker_async.enqueue.handles import JobFunction
from tests.worker.e2e.jobsapp import FAST, NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

SPANS_ENV: Final = "TRACING_SPANS_FILE"


async def greet(name: str) -> None:
    """Succeeds: its run is the CONSUMER span the test looks for."""


async def flaky() -> None:
    """Fails on its first run, succeeds on its retry."""
    if current_job().attempt == 1:
        raise RuntimeError("the first run fails")


@dataclass(frozen=True)
class Jobs:
    app: App
    greet: JobFunction[[str], Any]
    flaky: JobFunction[[], Any]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    app = App(redis_url, namespace=namespace, **{**FAST, **overrides})
    return Jobs(app, greet=app.job(name="greet")(greet), flaky=app.job(name="flaky")(flaky))


# -- spans as plain data (the worker's file, and the test's in-memory exporter) ---------


def describe(span: ReadableSpan) -> dict[str, Any]:
    """What a test checks of a finished span, as JSON-able data (ids in hex)."""
    context, parent = span.context, span.parent
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": None if parent is None else f"{parent.span_id:016x}",
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [{"name": event.name, "attributes": dict(event.attributes or {})}
                   for event in span.events],
    }


class JsonLinesExporter(SpanExporter):
    """Appends each finished span to a file as one JSON line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a") as out:
            for span in spans:
                out.write(json.dumps(describe(span)) + "\n")
        return SpanExportResult.SUCCESS


def read_spans(path: Path) -> list[dict[str, Any]]:
    """The spans a worker process has written so far (complete lines only)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True)
            if line.endswith("\n")]


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(
        Path(os.environ[SPANS_ENV]))))
    trace.set_tracer_provider(provider)
    overrides = json.loads(os.environ.get(SETTINGS_ENV) or "{}")
    return build(url, os.environ[NAMESPACE_ENV], **overrides).app


jobs = _from_env()
