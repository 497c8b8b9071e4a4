"""``tracing=``: on when opentelemetry-api can be imported, required with True, off
with False; without the API, one failed import when an App or worker is built."""

from __future__ import annotations

import sys
from collections.abc import Callable

import anyio
import pytest

from cogworker_async import App
from cogworker_async.errors import ConfigurationError
from cogworker_async.observe.tracing import JobTracer, job_tracer
from cogworker_async.worker.execute import Counters, Executor


@pytest.fixture
def no_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if opentelemetry-api were not installed: importing it fails."""
    for name in [name for name in sys.modules if name.startswith("opentelemetry")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)


def executor(tracing: bool | None) -> Executor:
    async def orphanings(queue: str, jid: str) -> int:
        return 0

    return Executor(Counters(), [], anyio.CapacityLimiter(1), orphanings, tracing=tracing)


@pytest.mark.usefixtures("no_otel")
def test_without_the_api_tracing_is_off_unless_required() -> None:
    assert job_tracer(None) is None
    assert job_tracer(False) is None
    App("redis://127.0.0.1:1", namespace="t")  # builds: tracing is simply off
    executor(None)
    for build in (lambda: job_tracer(True), lambda: App("redis://127.0.0.1:1", tracing=True),
                  lambda: executor(True)):
        with pytest.raises(ConfigurationError, match=r"pip install '\.\[otel\]' in your clone"):
            build()


def test_with_the_api_tracing_is_on_unless_turned_off() -> None:
    assert isinstance(job_tracer(None), JobTracer)
    assert isinstance(job_tracer(True), JobTracer)
    assert job_tracer(False) is None


async def test_without_the_api_jobs_run_and_enqueue_as_ever(
    no_otel: None, make_app: Callable[..., App],
) -> None:
    jobs = make_app()
    ran = anyio.Event()

    @jobs.job(name="ping")
    async def ping() -> None:
        ran.set()

    await ping.enqueue()
    async with jobs.worker():
        with anyio.fail_after(10):
            await ran.wait()
