"""The worker's lifespan (``@jobs.lifespan``) on a real Redis, through the real CLI where a
process matters: jobs — async and plain — read what it yielded; a lifespan that raises
stops the worker non-zero before it took a job (a queued job stays queued); its exit
runs after the last job settled, on SIGTERM and on a second signal; each child of
``--processes 2`` enters its own; the testing fake and inline modes enter it."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import redis.asyncio

from cogworker_async import App, ConfigurationError, LifespanFailed, current_job
from cogworker_async.redis.keys import Keys
from tests.waiting import wait_until
from tests.worker.e2e import lifespanapp
from tests.workerproc import WorkerProcess

WAIT = 30.0
TARGET = "tests.worker.e2e.lifespanapp:jobs"


@dataclass
class Pool:
    opened: int = 0
    closed: int = 0


def app_with_pool(make_app: Callable[..., App], seen: list[Any]) -> tuple[App, Any, Any, Pool]:
    app = make_app(track_jobs=True)
    pool = Pool()

    @app.lifespan
    async def resources() -> AsyncIterator[Pool]:
        pool.opened += 1
        yield pool
        pool.closed += 1

    @app.job(name="async_reader")
    async def async_reader() -> None:
        seen.append(("async", current_job().state_as(Pool).opened, pool.closed))

    @app.job(name="plain_reader")
    def plain_reader() -> None:
        seen.append(("plain", current_job().state.opened, pool.closed))

    return app, async_reader, plain_reader, pool


async def test_async_and_plain_jobs_read_what_the_lifespan_yielded(
    make_app: Callable[..., App],
) -> None:
    seen: list[Any] = []
    app, async_reader, plain_reader, pool = app_with_pool(make_app, seen)
    await async_reader.enqueue()
    await plain_reader.enqueue()

    async with app.worker():
        await wait_until(lambda: len(seen) == 2, timeout=WAIT)
        assert (pool.opened, pool.closed) == (1, 0)

    assert sorted(seen) == [("async", 1, 0), ("plain", 1, 0)]  # open while they ran
    assert (pool.opened, pool.closed) == (1, 1)  # closed once, after the worker stopped


async def test_the_testing_fake_and_inline_modes_enter_it(
    make_app: Callable[..., App],
) -> None:
    seen: list[Any] = []
    app, async_reader, plain_reader, pool = app_with_pool(make_app, seen)
    async with app.testing.fake():
        await async_reader.enqueue()
        await plain_reader.enqueue()
        await app.testing.drain()
    async with app.testing.inline():
        await async_reader.enqueue()

    # a drain enters it once for its runs; an inline run enters it again
    assert [(kind, opened) for kind, opened, _ in seen] == [
        ("async", 1), ("plain", 1), ("async", 2)]
    assert pool.closed == 2


def test_an_app_has_one_lifespan_and_it_is_an_async_generator(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    async def not_a_generator() -> None: ...

    with pytest.raises(TypeError, match="async generator function"):
        app.lifespan(not_a_generator)

    @app.lifespan
    async def first() -> AsyncIterator[None]:
        yield None

    with pytest.raises(ConfigurationError, match="one lifespan"):
        app.lifespan(first)


async def test_an_embedded_worker_whose_lifespan_raises_takes_no_job(
    make_app: Callable[..., App], namespace: str, r: redis.asyncio.Redis,
) -> None:
    app = make_app()

    @app.lifespan
    async def broken() -> AsyncIterator[None]:
        raise RuntimeError("the database is down")
        yield None  # pragma: no cover

    @app.job(name="waiting")
    async def waiting() -> None: ...

    await waiting.enqueue()
    with pytest.raises(LifespanFailed, match="RuntimeError: the database is down"):
        async with app.worker():
            pass
    assert await r.llen(Keys(namespace).queue("default")) == 1


async def events(r: redis.asyncio.Redis, namespace: str) -> list[str]:
    return [e.decode() for e in await r.lrange(lifespanapp.events_key(namespace), 0, -1)]


def start(redis_url: str, namespace: str, *args: str,
          env: dict[str, str] | None = None, **settings: Any) -> WorkerProcess:
    return WorkerProcess(redis_url, namespace, settings, ["--log-level", "INFO", *args],
                         target=TARGET, env=env).start()


async def test_a_worker_whose_lifespan_raises_exits_non_zero_having_taken_no_job(
    redis_url: str, namespace: str, r: redis.asyncio.Redis,
) -> None:
    app = lifespanapp.build(redis_url, namespace)
    try:
        await app.enqueue("hold", "queued", 0.0)
    finally:
        await app.close()
    worker = start(redis_url, namespace, env={lifespanapp.FAIL_ENV: "1"})

    status = await worker.wait_exit(timeout=WAIT)

    keys = Keys(namespace)
    assert status != 0
    assert "the database is down" in worker.log()
    assert await events(r, namespace) == [f"enter {worker.pid}"]
    assert await r.llen(keys.queue("default")) == 1  # still queued
    assert [key async for key in r.scan_iter(match=keys.in_progress("default", "*"))] == []


@pytest.mark.parametrize("second_signal", [False, True])
async def test_its_exit_runs_after_the_last_job_settled(
    redis_url: str, namespace: str, r: redis.asyncio.Redis,
    second_signal: bool,
) -> None:
    app = lifespanapp.build(redis_url, namespace)
    worker = start(redis_url, namespace, shutdown_timeout=5.0)
    try:
        await app.enqueue("hold", "job", 30.0 if second_signal else 1.0)
        await wait_until(lambda: _has(r, namespace, f"start job {worker.pid}"), timeout=WAIT)
        worker.signal(signal.SIGTERM)
        if second_signal:
            await anyio.sleep(0.2)
            worker.signal(signal.SIGTERM)  # a hard stop: the job is cancelled, given back
        status = await worker.wait_exit(timeout=WAIT)
        seen = await events(r, namespace)
        queued = await r.llen(Keys(namespace).queue("default"))
    finally:
        await app.close()

    pid = worker.pid
    assert seen[0] == f"enter {pid}"
    assert seen[-1] == f"exit {pid}"  # after everything else
    if second_signal:
        assert f"end job {pid}" not in seen
        assert queued == 1  # given back before the exit ran
    else:
        assert status == 0
        assert seen == [f"enter {pid}", f"start job {pid}", f"end job {pid}", f"exit {pid}"]


async def test_each_child_of_processes_2_enters_its_own(
    redis_url: str, namespace: str, r: redis.asyncio.Redis,
) -> None:
    worker = start(redis_url, namespace, "--processes", "2")

    async def two_entered() -> bool:
        return sum(e.startswith("enter ") for e in await events(r, namespace)) == 2
    await wait_until(two_entered, timeout=WAIT)
    await worker.stop(timeout=WAIT)

    seen = await events(r, namespace)
    entered = {e.split()[1] for e in seen if e.startswith("enter ")}
    exited = {e.split()[1] for e in seen if e.startswith("exit ")}
    assert len(entered) == 2
    assert str(worker.pid) not in entered  # the supervisor enters none: its children do
    assert exited == entered


async def _has(r: redis.asyncio.Redis, namespace: str, event: str) -> bool:
    return event in await events(r, namespace)
