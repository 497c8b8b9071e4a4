"""A client warns once, at its first enqueue, when Redis may evict its queued jobs."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from cogworker_async import App
from tests.servers import ServerProcess


@pytest.fixture
def evicting() -> Iterator[ServerProcess]:
    process = ServerProcess(extra=["--maxmemory-policy", "allkeys-lru"]).start()
    yield process
    process.cleanup()


def evictions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "maxmemory-policy" in r.getMessage()]


async def test_an_enqueuer_is_told_once_that_redis_evicts(
    evicting: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = App(evicting.url, namespace="evict")

    @jobs.job(name="noop")
    async def noop() -> None: ...

    try:
        with caplog.at_level(logging.WARNING):
            assert await noop.enqueue()
            assert await noop.enqueue()
            assert await noop.enqueue_many([((), {})])
    finally:
        await jobs.close()
    [warning] = evictions(caplog)
    assert "allkeys-lru" in warning
    assert "noeviction" in warning


async def test_no_warning_with_noeviction(
    caplog: pytest.LogCaptureFixture, redis_url: str, namespace: str
) -> None:
    jobs = App(redis_url, namespace=namespace)

    @jobs.job(name="noop")
    async def noop() -> None: ...

    try:
        with caplog.at_level(logging.WARNING):
            assert await noop.enqueue()
    finally:
        await jobs.close()
    assert evictions(caplog) == []
