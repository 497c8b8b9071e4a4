"""An idle worker picks up a new job at once: each enqueue wakes it across processes.

The worker's fallback poll (``idle_fetch_interval``) is set far beyond the bound, so only
the wake-up can make it: the job is enqueued once the worker has sent nothing to Redis
for a second (it is waiting, not in the middle of a fetch).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio

from tests.servers import ServerProcess
from tests.worker.e2e.conftest import StartWorker, ran, wait_ready, wait_while_alive
from tests.worker.e2e.jobsapp import build

PICKUP_BOUND = 2.0
"""Seconds within which an idle worker must start a new job (not a performance test)."""
SLOW_FALLBACKS = {"idle_fetch_interval": 60.0, "poll_interval": 60.0}


@pytest.fixture
def own_server() -> Iterator[ServerProcess]:
    """A server of its own: every other client on it is the worker's."""
    server = ServerProcess().start()
    yield server
    server.cleanup()


@pytest.fixture
async def client(own_server: ServerProcess) -> AsyncIterator[redis.asyncio.Redis]:
    c = redis.asyncio.Redis.from_url(own_server.url, single_connection_client=True)
    yield c
    await c.aclose()


async def _quiet(client: redis.asyncio.Redis, seconds: int) -> bool:
    """True when no other connection has sent a command for ``seconds`` (whole seconds)."""
    me = await client.client_id()
    others = [c for c in await client.client_list() if int(c["id"]) != me]
    return bool(others) and all(int(c["idle"]) >= seconds for c in others)


async def test_idle_worker_picks_up_a_new_job_quickly(
    own_server: ServerProcess, client: redis.asyncio.Redis, namespace: str,
    start_worker: StartWorker,
) -> None:
    worker = start_worker(url=own_server.url, **SLOW_FALLBACKS)
    await wait_ready(client, namespace, worker)
    await wait_while_alive(worker, lambda: _quiet(client, 1), timeout=10)

    jobs = build(own_server.url, namespace)
    try:
        enqueued = time.monotonic()
        await jobs.record.enqueue("wake")
        await wait_while_alive(worker, lambda: _ran(client, namespace, "wake"),
                               timeout=PICKUP_BOUND)
        assert time.monotonic() - enqueued < PICKUP_BOUND

        # Idle again, and a second one: the wake-up is not a one-off.
        await wait_while_alive(worker, lambda: _quiet(client, 1), timeout=10)
        enqueued = time.monotonic()
        await jobs.record.enqueue("again")
        await wait_while_alive(worker, lambda: _ran(client, namespace, "again"),
                               timeout=PICKUP_BOUND)
    finally:
        await jobs.app.close()
    await worker.stop()
    assert await ran(client, namespace) == ["wake", "again"]


async def _ran(client: redis.asyncio.Redis, namespace: str, tag: str) -> bool:
    return tag in await ran(client, namespace)
