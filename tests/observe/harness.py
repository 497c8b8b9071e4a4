"""Helpers of the tracing tests: a worker process with its span file, and reading spans."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.observe import tracedapp
from tests.waiting import wait_until
from tests.workerproc import WorkerProcess

TARGET: Final = "tests.observe.tracedapp:jobs"
WORKER_TIMEOUT: Final = 30.0
"""Seconds a worker process may take to start and run a job (imports on a busy machine)."""

Span = dict[str, Any]


@dataclass(frozen=True)
class TracedWorker:
    """A ``cogworker-async run tests.observe.tracedapp:jobs`` process and its span file."""

    process: WorkerProcess
    spans_path: Path

    async def spans(self, match: Callable[[Span], bool], count: int) -> list[Span]:
        """The first ``count`` spans it wrote that ``match`` (waits for them)."""
        found: list[Span] = []

        def enough() -> bool:
            process = self.process
            assert process.alive(), f"worker exited with {process.returncode}:\n{process.log()}"
            found[:] = [span for span in tracedapp.read_spans(self.spans_path) if match(span)]
            return len(found) >= count

        await wait_until(enough, timeout=WORKER_TIMEOUT, every=0.05)
        return found[:count]


def finished(exporter: InMemorySpanExporter) -> list[Span]:
    """The test process's finished spans, as ``tracedapp.describe`` tells them."""
    return [tracedapp.describe(span) for span in exporter.get_finished_spans()]


def only(spans: list[Span], **wanted: Any) -> Span:
    """The one span with these fields (``kind="PRODUCER"``...); fails if not exactly one."""
    found = [span for span in spans if all(span[key] == value for key, value in wanted.items())]
    assert len(found) == 1, f"{len(found)} spans with {wanted}: {spans}"
    return found[0]


def consumer_of(job: str) -> Callable[[Span], bool]:
    """Matches the CONSUMER spans of runs of ``job``."""
    return lambda span: span["kind"] == "CONSUMER" and \
        span["attributes"].get("cogworker.job.name") == job
