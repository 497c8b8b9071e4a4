"""A worker's own Prometheus metrics (``metrics_port``), scraped over HTTP from a real
worker in this process: runs by outcome, run-time and wait histograms, the process
gauges, recoveries; a port in use refuses to start; no port, no server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Final

import anyio
import pytest

from cogworker_async import App, Retry
from cogworker_async.errors import ConfigurationError
from cogworker_async.redis.store import Store
from tests.prometheus.scraping import scrape, value
from tests.servers import free_port
from tests.waiting import wait_until
from tests.worker.test_recovery import plant_dead, raw_job

HOLD_LIMIT: Final = 10.0
"""Seconds a held job waits for its release at most (a test that forgets fails)."""


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside task groups' exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def serving_threads() -> list[str]:
    """Threads of an HTTP server's loop in this process."""
    return [t.name for t in threading.enumerate() if "serve_forever" in t.name]


async def runs(port: int) -> float:
    """Runs counted so far, over every job and outcome."""
    return sum(s.value for s in await scrape(port) if s.name == "cogworker_jobs_total")


async def test_runs_are_counted_by_outcome_with_their_run_and_wait_times(
    make_app: Callable[..., App]
) -> None:
    port = free_port()
    jobs = make_app(metrics_port=port)
    tries: list[int] = []

    @jobs.job(name="ok")
    async def ok() -> None: ...

    @jobs.job(name="flaky", retry=1)
    async def flaky() -> None:
        tries.append(1)
        if len(tries) == 1:
            raise Retry(in_=0)

    @jobs.job(name="doomed", retry=False)
    async def doomed() -> None:
        raise RuntimeError("no")

    @jobs.job(name="picky", retry=5, discard_on=(PermissionError,))
    async def picky() -> None:
        raise PermissionError("never again")

    for _ in range(3):
        await ok.enqueue()
    await flaky.enqueue()
    await doomed.enqueue()
    await picky.enqueue()
    async with jobs.worker(concurrency=2):
        await wait_until(lambda: _runs_are(port, 7))
        samples = await scrape(port)
    expected = {("ok", "succeeded"): 3, ("flaky", "retried"): 1, ("flaky", "succeeded"): 1,
                ("doomed", "dead"): 1, ("picky", "discarded"): 1}
    for job in ("ok", "flaky", "doomed", "picky"):
        for outcome in ("succeeded", "retried", "dead", "discarded"):
            # Every outcome of a job that ran has its series, at 0 if it never happened.
            assert value(samples, "cogworker_jobs_total", job=job, queue="default",
                         outcome=outcome) == expected.get((job, outcome), 0), (job, outcome)
    assert value(samples, "cogworker_job_duration_seconds_count", job="ok") == 3
    assert value(samples, "cogworker_job_duration_seconds_count", job="flaky") == 2
    assert value(samples, "cogworker_job_wait_seconds_count", job="ok") == 3
    # Each run took far less than a second, and waited less than a minute.
    assert value(samples, "cogworker_job_duration_seconds_bucket", job="ok", le="1.0") == 3
    assert value(samples, "cogworker_job_wait_seconds_bucket", job="ok", le="60.0") == 3
    assert value(samples, "cogworker_concurrency") == 2
    assert value(samples, "cogworker_pending_settlements") == 0
    lag = value(samples, "cogworker_loop_lag_seconds")
    assert lag is not None
    assert lag >= 0
    # Stopped, the worker has freed its port: a server (SO_REUSEADDR, as the metrics
    # server binds: the scrapes' connections may linger in TIME_WAIT) can listen there.
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()


async def _runs_are(port: int, n: int) -> bool:
    return await runs(port) == n


async def test_busy_slots_show_a_running_job(make_app: Callable[..., App]) -> None:
    port = free_port()
    jobs = make_app(metrics_port=port)
    started, release = anyio.Event(), anyio.Event()

    @jobs.job(name="hold")
    async def hold() -> None:
        started.set()
        with anyio.fail_after(HOLD_LIMIT):
            await release.wait()

    async with jobs.worker(concurrency=3):
        assert value(await scrape(port), "cogworker_busy_slots") == 0
        await hold.enqueue()
        await started.wait()
        samples = await scrape(port)
        assert value(samples, "cogworker_busy_slots") == 1
        assert value(samples, "cogworker_concurrency") == 3
        release.set()
        await wait_until(lambda: _runs_are(port, 1))
        assert value(await scrape(port), "cogworker_busy_slots") == 0


async def test_jobs_recovered_from_a_dead_process_are_counted(
    make_app: Callable[..., App], store: Store
) -> None:
    port = free_port()
    jobs = make_app(metrics_port=port, queues=["default", "mail"])
    ran: list[int] = []

    @jobs.job(name="rec")
    async def rec(n: int) -> None:
        ran.append(n)

    await plant_dead(store, {"default": [raw_job("rec", 1), raw_job("rec", 2)]})
    async with jobs.worker():
        await wait_until(lambda: sorted(ran) == [1, 2], timeout=5)
        samples = await scrape(port)
    assert value(samples, "cogworker_jobs_recovered_total", queue="default") == 2
    assert value(samples, "cogworker_jobs_recovered_total", queue="mail") == 0
    # The recovered jobs then ran like any other.
    assert value(samples, "cogworker_jobs_total", job="rec", outcome="succeeded") == 2


async def test_a_metrics_port_in_use_fails_the_start_naming_it(
    make_app: Callable[..., App], store: Store
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        jobs = make_app(metrics_port=port)
        with pytest.raises(BaseExceptionGroup) as caught:
            async with jobs.worker():
                pytest.fail("the worker started")
    [error] = leaves(caught.value)
    assert isinstance(error, ConfigurationError)
    assert f"127.0.0.1:{port}" in str(error)
    assert "in use" in str(error)
    # It left nothing behind: no process registered, no server thread.
    assert await store.client.scard(store.keys.processes) == 0
    assert serving_threads() == []


async def test_no_metrics_port_serves_nothing(make_app: Callable[..., App]) -> None:
    jobs = make_app()
    ran = anyio.Event()

    @jobs.job(name="ok")
    async def ok() -> None:
        ran.set()

    await ok.enqueue()
    async with jobs.worker() as manager:
        await ran.wait()
        assert manager.metrics is None
        assert serving_threads() == []


async def test_a_server_thread_runs_only_while_the_worker_does(
    make_app: Callable[..., App]
) -> None:
    """The check above can fail: with a port, there is a server thread."""
    jobs = make_app(metrics_port=free_port())
    async with jobs.worker():
        assert len(serving_threads()) == 1
    assert serving_threads() == []
