"""Pausing a queue and a limiter entered outside a job, the same on Redis and in the fake:
a paused queue's job waits, queued, until its queue is resumed; a concurrent limiter of 1
entered by a caller (a web handler) refuses a second entry and admits once the first
has left, or when a waiting entry's holder leaves."""

from __future__ import annotations

import anyio
import pytest

from cogworker_async import OverLimit
from cogworker_async.redis.pausing import Pause
from tests.conformance.conftest import Backend


async def test_a_paused_queues_job_waits_until_resume(backend: Backend) -> None:
    app = backend.app(queues=["default", "other"])
    ran: list[str] = []

    @app.job
    async def work(tag: str) -> None:
        ran.append(tag)

    assert await app.queues.pause("default") is True
    assert await app.pause("default") is False  # paused already: its first pause kept
    held = await work.enqueue("paused")
    assert held is not None
    await work.options(queue="other").enqueue("marker")
    # the marker ran: a fetch came after the pause, and left the paused queue's job
    await backend.run(app, until=lambda: "marker" in ran)
    assert ran == ["marker"]
    assert (await app.status(held)).state == "queued"
    paused = await app.queues.paused()
    assert list(paused) == ["default"]
    assert isinstance(paused["default"], Pause)
    assert paused["default"].queue == "default"
    assert paused["default"].since > 0
    assert await app.paused(["other"]) == {}

    assert await app.queues.resume("default") is True
    assert await app.resume("default") is False  # not paused any more
    await backend.run(app, until=lambda: "paused" in ran)
    assert ran == ["marker", "paused"]
    assert (await app.status(held)).state == "succeeded"
    assert await app.queues.paused() == {}


async def test_a_concurrent_limiter_of_one_outside_a_job_refuses_a_second_entry(
    backend: Backend,
) -> None:
    app = backend.app()
    api = app.limiter("outbound-api", concurrent=1)
    async with api:
        with pytest.raises(OverLimit) as refused:
            async with api:
                pytest.fail("a second holder was admitted")
        assert refused.value.limiter == "outbound-api"
        assert refused.value.retry_after is None  # a concurrent limiter cannot tell
    async with api:  # the first left: its slot is free again
        pass


async def test_a_waiting_entry_is_admitted_once_the_holder_leaves(backend: Backend) -> None:
    app = backend.app()
    api = app.limiter("outbound-api", concurrent=1)
    patient = app.limiter("outbound-api-waiting", concurrent=1, wait=10)
    order: list[str] = []

    async def second() -> None:
        async with patient:
            order.append("second in")

    async with anyio.create_task_group() as tg:
        async with patient:  # the first holder
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()  # the second is asking, or waiting
            order.append("first out")
    assert order == ["first out", "second in"]
    async with api:  # another limiter: its own slots
        pass
