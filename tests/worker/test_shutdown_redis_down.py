"""Graceful shutdown while Redis is down: finished jobs are not run again.

Five jobs finish while Redis is stopped, then the worker is asked to stop. Their
settlements get what is left of ``shutdown_timeout``, retried with backoff: if Redis
returns within it, they settle and nothing runs twice. The limit (Redis down for the
whole timeout) is shown too: they stay in progress and run again once recovered.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import pytest
import redis.asyncio

from cogworker_async import App
from tests.conftest import FAST
from tests.servers import ServerProcess
from tests.waiting import wait_until

JOBS = 5


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    process = ServerProcess(appendonly=True).start()  # the list must survive the restart
    yield process
    process.cleanup()


def app_with_counter(server: ServerProcess, runs: list[int], gate: anyio.Event,
                     shutdown_timeout: float) -> App:
    jobs = App(server.url, namespace="down", **{**FAST, "shutdown_timeout": shutdown_timeout})

    @jobs.job(name="counted")
    async def counted(n: int) -> None:
        await gate.wait()
        runs.append(n)

    return jobs


async def test_settlements_wait_for_redis_through_the_shutdown(server: ServerProcess) -> None:
    runs: list[int] = []
    gate = anyio.Event()
    jobs = app_with_counter(server, runs, gate, shutdown_timeout=20.0)
    client = redis.asyncio.Redis(port=server.port)
    try:
        async with jobs.worker() as manager:
            for n in range(JOBS):
                await jobs.enqueue("counted", n)
            listed = manager.store.keys.in_progress("default", manager.identity)

            async def all_listed() -> bool:
                return bool(await client.llen(listed) == JOBS)

            await wait_until(all_listed, timeout=10)
            server.stop()
            gate.set()
            await wait_until(lambda: len(manager.ledger.pending) == JOBS, timeout=15)

            async def bring_redis_back() -> None:
                await anyio.sleep(1.0)  # the stop below must begin with Redis down
                await anyio.to_thread.run_sync(server.start)

            began = time.monotonic()
            async with anyio.create_task_group() as tg:
                tg.start_soon(bring_redis_back)
                manager.stop()
                await manager.wait_stopped()
            assert time.monotonic() - began >= 1.0  # it waited for Redis, within the timeout
        assert await client.llen(listed) == 0  # settled: nothing left to recover
        assert await client.llen(manager.store.keys.queue("default")) == 0
    finally:
        await client.aclose()
        await jobs.close()
    assert sorted(runs) == list(range(JOBS))


async def test_the_limit_redis_down_for_the_whole_timeout(server: ServerProcess) -> None:
    """What remains: past shutdown_timeout the finished jobs stay in progress, and once
    Redis is back recovery requeues them and they run again (README: Guarantees)."""
    runs: list[int] = []
    gate = anyio.Event()
    jobs = app_with_counter(server, runs, gate, shutdown_timeout=1.0)
    try:
        async with jobs.worker() as manager:
            for n in range(JOBS):
                await jobs.enqueue("counted", n)
            await wait_until(lambda: len(manager.ledger.running) == JOBS, timeout=10)
            server.stop()
            gate.set()
            await wait_until(lambda: len(manager.ledger.pending) == JOBS, timeout=15)
        # stopped: Redis was down for the whole shutdown_timeout
        server.start()
        await jobs.close()
        async with jobs.worker():
            await wait_until(lambda: len(runs) == 2 * JOBS, timeout=30)
    finally:
        await jobs.close()
    assert sorted(runs) == sorted([*range(JOBS), *range(JOBS)])
