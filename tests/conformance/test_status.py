"""A job as a value, the same on Redis and in the fake: its status through its life,
``cancel``, ``result``; and a limiter around a job's work."""

from __future__ import annotations

import pytest

from tests.conformance.conftest import Backend


async def test_status_follows_a_job_to_its_result(backend: Backend) -> None:
    app = backend.app()

    @app.job(name="add", keep_result=60)
    async def add(a: int, b: int) -> int:
        return a + b

    jid = await add.enqueue(2, 3)
    assert jid is not None
    assert (await app.status(jid)).state == "queued"
    assert (await app.status("no-such-job")).state == "unknown"

    async def ended() -> bool:
        return (await app.status(jid)).state == "succeeded"

    await backend.run(app, until=ended)
    found = await app.status(jid)
    assert (found.name, found.attempt, found.result) == ("add", 1, 5)
    assert await app.result(jid, timeout=5) == 5


async def test_a_failed_jobs_error_and_result(backend: Backend) -> None:
    app = backend.app()

    @app.job(retry=False)
    async def explode() -> None:
        raise ValueError("no")

    jid = await explode.enqueue()
    assert jid is not None

    async def ended() -> bool:
        return (await app.status(jid)).state == "dead"

    await backend.run(app, until=ended)
    assert (await app.status(jid)).error == "ValueError: no"
    with pytest.raises(Exception, match="ValueError"):
        await app.result(jid, timeout=5)


async def test_a_cancelled_job_never_runs(backend: Backend) -> None:
    app = backend.app()
    ran: list[str] = []

    @app.job
    async def work(tag: str) -> None:
        ran.append(tag)

    waiting = await work.enqueue("queued")
    later = await work.enqueue_in(60, "scheduled")
    kept = await work.enqueue("kept")
    assert waiting is not None
    assert later is not None
    assert (await app.status(later)).state == "scheduled"
    assert await app.cancel(waiting) == "cancelled"
    assert await app.cancel(later) == "cancelled"
    assert await app.cancel("no-such-job") == "unknown"
    await backend.run(app, until=lambda: ran == ["kept"])
    assert ran == ["kept"]
    assert [(await app.status(jid)).state for jid in (waiting, later)] == ["cancelled"] * 2
    assert kept is not None
    assert await app.cancel(kept) == "finished"


async def test_a_job_inside_a_limiter_runs(backend: Backend) -> None:
    app = backend.app(concurrency=2)
    payments = app.limiter("payments", concurrent=1)
    ran: list[int] = []

    @app.job
    async def charge(order: int) -> None:
        async with payments:
            ran.append(order)

    for order in range(3):
        await charge.enqueue(order)
    await backend.run(app, until=lambda: len(ran) == 3)
    assert sorted(ran) == [0, 1, 2]
