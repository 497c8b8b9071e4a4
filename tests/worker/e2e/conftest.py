"""End-to-end harness: the real CLI in a subprocess, against a private redis-server.

Each test gets its own namespace on the session server (``redis_server`` in
tests/conftest.py), starts workers with ``start_worker(...)`` and talks to Redis through
``r`` (raw bytes) and ``jobs`` (the same job app, to enqueue). Every worker process a test
starts is killed by pid at teardown if the test did not stop it; its log is printed, so
a failing test shows what the worker said.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final

import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests import clients
from tests.clients import async_client
from tests.conftest import url_of_topology
from tests.waiting import wait_until
from tests.worker.e2e import jobsapp
from tests.workerproc import WorkerProcess, worker_pool

READY_TIMEOUT: Final = 15.0
"""Seconds a worker may take to start (imports on a busy 2-core machine)."""


StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def start_worker(redis_url: str, namespace: str) -> Iterator[StartWorker]:
    """``start_worker(*cli_args, redis_url=..., **settings)``: a running worker process."""
    with worker_pool() as workers:
        def start(*args: str, url: str | None = None, **settings: Any) -> WorkerProcess:
            worker = WorkerProcess(url or redis_url, namespace, settings, list(args))
            workers.append(worker)
            return worker.start()
        yield start


# Every end-to-end test runs on one Redis and on a 3-master Redis Cluster (the session's,
# from tests/conftest.py): nothing changes for users on a cluster.
redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)


@pytest.fixture
async def r(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    """A plain client on the test server (raw bytes), to plant and inspect keys."""
    client = async_client(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def jobs(redis_url: str, namespace: str) -> AsyncIterator[jobsapp.Jobs]:
    """The job app on the test server and namespace, to enqueue from the test."""
    built = jobsapp.build(redis_url, namespace)
    yield built
    await built.app.close()


# -- reading the outcome --------------------------------------------------------------


async def ran(r: redis.asyncio.Redis, namespace: str) -> list[str]:
    """Tags of the finished runs, in order."""
    return [tag.decode() for tag in await r.lrange(jobsapp.ran_key(namespace), 0, -1)]


async def started(r: redis.asyncio.Redis, namespace: str) -> list[str]:
    return [tag.decode() for tag in await r.lrange(jobsapp.started_key(namespace), 0, -1)]


async def in_progress(r: redis.asyncio.Redis, namespace: str) -> list[bytes]:
    """Every entry on every in-progress list of the namespace."""
    entries: list[bytes] = []
    async for key in r.scan_iter(match=Keys(namespace).in_progress_pattern):
        entries += await r.lrange(key, 0, -1)
    return entries


async def zset_entries(r: redis.asyncio.Redis, key: str) -> list[dict[str, Any]]:
    return [json.loads(member) for member in await r.zrange(key, 0, -1)]


async def counter(r: redis.asyncio.Redis, key: str) -> int:
    return int(await r.get(key) or 0)


async def wait_while_alive(
    worker: WorkerProcess, condition: Callable[[], Awaitable[bool]], *, timeout: float
) -> None:
    """``wait_until(condition)``, failing at once (with its log) if the worker exits."""

    async def check() -> bool:
        assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        return await condition()

    await wait_until(check, timeout=timeout)


async def wait_ready(r: redis.asyncio.Redis, namespace: str, worker: WorkerProcess,
                     subscribers: int = 1) -> None:
    """Until the worker listens for wake-ups (its Manager runs and can fetch)."""

    async def listening() -> bool:
        return await clients.subscribers(r, Keys(namespace).wake_channel) >= subscribers

    await wait_while_alive(worker, listening, timeout=READY_TIMEOUT)
