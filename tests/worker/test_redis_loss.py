"""Redis restarted without persistence under a running worker: its keys are gone, but
nobody took its jobs. It must not fence itself (cancel its running jobs, which would
then never finish): it registers again, lists its jobs again, and they finish and settle.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import redis.asyncio

from cogworker_async import App
from tests.conftest import FAST
from tests.servers import ServerProcess
from tests.waiting import wait_until


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    process = ServerProcess().start()  # no AOF: a restart forgets everything
    yield process
    process.cleanup()


async def test_running_jobs_survive_a_redis_restart_that_lost_every_key(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    # The retry is due in an hour: the one run of "fails" this test sees is its first.
    jobs = App(server.url, namespace="loss", **{**FAST, "retry_base_delay": 3600.0})
    gate = anyio.Event()
    started: list[str] = []
    finished: list[str] = []

    @jobs.job(name="completes")
    async def completes() -> None:
        started.append("completes")
        await gate.wait()
        finished.append("completes")

    @jobs.job(name="fails", retry=3)
    async def fails() -> None:
        started.append("fails")
        await gate.wait()
        finished.append("fails")
        raise RuntimeError("after the restart")

    client = redis.asyncio.Redis(port=server.port)
    try:
        with caplog.at_level(logging.WARNING):
            async with jobs.worker() as manager:
                await completes.enqueue()
                await fails.enqueue()
                await wait_until(lambda: len(started) == 2, timeout=10)

                server.stop()
                server.start()  # same port, empty

                listed = manager.store.keys.in_progress("default", manager.identity)

                async def relisted() -> bool:
                    return bool(await client.llen(listed) == 2)

                await wait_until(relisted, timeout=15)
                gate.set()
                await wait_until(lambda: len(finished) == 2, timeout=10)

                async def settled() -> bool:
                    return bool(await client.llen(listed) == 0
                                and await client.zcard(manager.store.keys.retry("default")) == 1)

                await wait_until(settled, timeout=15)
                [entry] = await client.zrange(manager.store.keys.retry("default"), 0, -1)
                retried: dict[str, Any] = json.loads(entry)
                assert retried["class"] == "fails"
                assert retried["error_message"] == "after the restart"
    finally:
        await client.aclose()
        await jobs.close()
    assert sorted(finished) == ["completes", "fails"]  # neither was cancelled
    assert not [r for r in caplog.records if "declared dead" in r.getMessage()]
    assert [r for r in caplog.records if "listed again" in r.getMessage()]
