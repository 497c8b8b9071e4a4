"""``run`` and its lifespan's edges, through the real CLI (issue 40, defects 9 and 24).

9. A lifespan that hangs as it is entered still obeys SIGTERM/SIGINT: the first
   cancels the entry (its cleanup runs) and the process exits 0, or, if the entry
   ignores the cancel (shielded, or blocking the event loop), exits 1 once
   ``shutdown_timeout`` has passed, saying so; a second signal exits at once. The
   same under ``--processes 2`` (the supervisor passes the signals on).
24. A lifespan whose exit raises: the worker stopped and its jobs were settled; ``run``
   says so in one ``error:`` line (no traceback) and exits 5, its own code.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final

import pytest
import redis.asyncio

from cogworker_async import App, LifespanExitFailed
from cogworker_async.redis.keys import Keys
from tests.cli import lifespanhang
from tests.clients import async_client
from tests.waiting import wait_until
from tests.workerproc import WorkerProcess, worker_pool

START: Final = 30.0
"""Seconds for a worker process to start (imports on a busy 2-core machine)."""
SLACK: Final = 6.0
"""Seconds an exit may take past its bound (the interpreter's exit on a busy machine)."""
EXIT_LIFESPAN: Final = 5


@pytest.fixture
async def r(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = async_client(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    with worker_pool() as pool:
        yield pool


def start(workers: list[WorkerProcess], redis_url: str, namespace: str, mode: str,
          *args: str, **settings: Any) -> WorkerProcess:
    worker = WorkerProcess(redis_url, namespace, settings, ["--log-level", "INFO", *args],
                           target=lifespanhang.TARGET,
                           env={lifespanhang.MODE_ENV: mode})
    workers.append(worker)
    return worker.start()


async def events(r: redis.asyncio.Redis, namespace: str) -> list[str]:
    return [e.decode() for e in await r.lrange(lifespanhang.events_key(namespace), 0, -1)]


async def entered(r: redis.asyncio.Redis, namespace: str, count: int = 1) -> None:
    """Wait until ``count`` lifespans are being entered (each noted ``enter``)."""
    async def enough() -> bool:
        return sum(e.startswith("enter ") for e in await events(r, namespace)) >= count
    await wait_until(enough, timeout=START)


async def timed_exit(worker: WorkerProcess, timeout: float) -> tuple[int, float]:
    began = time.monotonic()
    status = await worker.wait_exit(timeout=timeout)
    return status, time.monotonic() - began


# -- 9: a lifespan that hangs as it is entered --------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
async def test_a_signal_cancels_a_hanging_lifespan_entry_and_exits_0(
    redis_url: str, namespace: str, r: redis.asyncio.Redis, workers: list[WorkerProcess],
    signum: int,
) -> None:
    worker = start(workers, redis_url, namespace, "hang", shutdown_timeout=20.0)
    await entered(r, namespace)

    worker.signal(signum)
    status, took = await timed_exit(worker, 20.0 + SLACK)

    assert status == 0, worker.log()
    assert took < 10.0  # the cancel, not the bound
    assert f"cancelled {worker.pid}" in await events(r, namespace)  # its cleanup ran
    assert "lifespan" in worker.log()
    assert "Traceback" not in worker.log()


async def test_a_lifespan_entry_that_ignores_the_cancel_is_left_at_the_bound(
    redis_url: str, namespace: str, r: redis.asyncio.Redis, workers: list[WorkerProcess],
) -> None:
    worker = start(workers, redis_url, namespace, "stubborn", shutdown_timeout=2.0)
    await entered(r, namespace)

    worker.signal(signal.SIGTERM)
    status, took = await timed_exit(worker, 2.0 + SLACK)

    assert status == 1, worker.log()
    assert took >= 1.5
    errors = [line for line in worker.log().splitlines() if line.startswith("error:")]
    assert len(errors) == 1, worker.log()
    assert "lifespan" in errors[0]
    assert "2s" in errors[0]


@pytest.mark.parametrize("mode", ["stubborn", "block"])
async def test_a_second_signal_exits_at_once_while_the_lifespan_is_entered(
    redis_url: str, namespace: str, r: redis.asyncio.Redis, workers: list[WorkerProcess],
    mode: str,
) -> None:
    worker = start(workers, redis_url, namespace, mode, shutdown_timeout=60.0)
    await entered(r, namespace)

    worker.signal(signal.SIGTERM)
    await wait_until(lambda: "lifespan" in worker.log(), timeout=10.0)
    worker.signal(signal.SIGTERM)
    status, took = await timed_exit(worker, 15.0)

    assert status == 1, worker.log()
    assert took < 15.0
    errors = [line for line in worker.log().splitlines() if line.startswith("error:")]
    assert len(errors) == 1, worker.log()
    assert "again" in errors[0]


async def test_a_lifespan_blocking_the_event_loop_is_left_at_the_bound(
    redis_url: str, namespace: str, r: redis.asyncio.Redis, workers: list[WorkerProcess],
) -> None:
    worker = start(workers, redis_url, namespace, "block", shutdown_timeout=2.0)
    await entered(r, namespace)

    worker.signal(signal.SIGTERM)
    status, _ = await timed_exit(worker, 2.0 + SLACK)

    assert status == 1, worker.log()
    assert any(line.startswith("error:") and "lifespan" in line
               for line in worker.log().splitlines()), worker.log()


@pytest.mark.parametrize(("mode", "code"), [("hang", 0), ("stubborn", 1)])
async def test_under_processes_2_a_signal_stops_children_entering_their_lifespans(
    redis_url: str, namespace: str, r: redis.asyncio.Redis, workers: list[WorkerProcess],
    mode: str, code: int,
) -> None:
    supervisor = start(workers, redis_url, namespace, mode, "--processes", "2",
                       shutdown_timeout=3.0)
    await entered(r, namespace, count=2)

    supervisor.signal(signal.SIGTERM)
    status, _ = await timed_exit(supervisor, 3.0 + SLACK)

    assert status == code, supervisor.log()
    if mode == "hang":
        cancelled = [e for e in await events(r, namespace) if e.startswith("cancelled ")]
        assert len(cancelled) == 2


# -- 24: a lifespan whose exit raises -----------------------------------------------------


@pytest.mark.parametrize("processes", [False, True])
async def test_a_lifespan_exit_that_raises_is_one_error_line_and_exit_5(
    redis_url: str, namespace: str, r: redis.asyncio.Redis, workers: list[WorkerProcess],
    processes: bool,
) -> None:
    app = lifespanhang.build(redis_url, namespace)
    try:
        jid = await app.enqueue("work", "one")
        assert jid is not None
        worker = start(workers, redis_url, namespace, "exit_raises",
                       *(["--processes", "1"] if processes else []))

        async def ran() -> bool:
            return any(e.startswith("ran one ") for e in await events(r, namespace))
        await wait_until(ran, timeout=START)
        await wait_until(lambda: _succeeded(app, jid), timeout=START)
        worker.signal(signal.SIGTERM)
        status = await worker.wait_exit(timeout=START)
        state = (await app.status(jid)).state
    finally:
        await app.close()

    log = worker.log()
    assert status == EXIT_LIFESPAN, log
    assert "Traceback" not in log
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, log
    assert "the pool would not close" in errors[0]
    assert "exit" in errors[0]
    # The jobs were settled before the exit ran: nothing left in progress or queued.
    assert state == "succeeded"
    keys = Keys(namespace)
    assert [key async for key in r.scan_iter(match=keys.in_progress("default", "*"))] == []
    assert await r.llen(keys.queue("default")) == 0


async def _succeeded(app: Any, jid: str) -> bool:
    return bool((await app.status(jid)).state == "succeeded")


async def test_an_embedded_worker_whose_lifespan_exit_raises_raises_lifespan_exit_failed(
    make_app: Callable[..., App],
) -> None:
    """``jobs.worker()``: the error itself (not a task group's), after the jobs ran."""
    app = make_app()
    ran: list[str] = []

    @app.lifespan
    async def resources() -> AsyncIterator[None]:
        yield None
        raise RuntimeError("the pool would not close")

    @app.job(name="work")
    async def work() -> None:
        ran.append("work")

    await work.enqueue()
    with pytest.raises(LifespanExitFailed, match="the pool would not close") as caught:
        async with app.worker():
            await wait_until(lambda: ran == ["work"], timeout=START)
    assert isinstance(caught.value.__cause__, RuntimeError)


async def test_a_worker_that_failed_keeps_its_own_error_when_its_lifespan_exit_raises_too(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.lifespan
    async def resources() -> AsyncIterator[None]:
        yield None
        raise RuntimeError("the pool would not close")

    with pytest.raises(BaseExceptionGroup) as caught:  # the block's error, in the
        async with app.worker():  # worker's task group as ever; the exit's is logged
            raise ZeroDivisionError
    assert caught.group_contains(ZeroDivisionError)
    assert not caught.group_contains(LifespanExitFailed)
