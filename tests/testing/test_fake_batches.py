"""Batches in the testing fake: ``fake()``/``drain()`` and ``inline()`` run members and
callbacks as a worker and its relay do, with no Redis."""

from __future__ import annotations

from typing import Any

import pytest

from cogworker_async import App, current_job


def shop() -> tuple[App, list[Any], dict[str, Any]]:
    app = App("redis://127.0.0.1:1/0", namespace="fake")  # never reached
    seen: list[Any] = []

    @app.job(retry=0)
    async def work(n: int) -> int:
        if n < 0:
            raise ValueError(f"bad {n}")
        seen.append(("work", n))
        return n

    @app.job()
    async def report(kind: str) -> None:
        seen.append((kind, current_job().batch_id))

    return app, seen, {"work": work, "report": report}


async def test_drain_runs_the_members_then_each_callback_once() -> None:
    app, seen, jobs = shop()
    report = jobs["report"]
    with app.testing.fake() as testing:
        async with app.batch(on_complete=report.s("complete"), on_success=report.s("success"),
                             on_death=report.s("death")) as batch:
            await jobs["work"].enqueue(1)
            await jobs["work"].enqueue_many([((2,), {}), ((3,), {})])
        runs = await testing.drain()
        assert await testing.drain() == []  # nothing more: once each
        status = await app.batch_status(batch.bid)

    assert [run.name for run in runs][-2:] == [report.name, report.name]
    assert seen == [("work", 1), ("work", 2), ("work", 3), ("complete", batch.bid),
                    ("success", batch.bid)]
    assert (status.state, status.total, status.succeeded) == ("success", 3, 3)
    assert status.callbacks == {"complete": f"{batch.bid}-complete",
                                "success": f"{batch.bid}-success"}


async def test_a_dead_member_calls_death_and_complete_not_success() -> None:
    app, seen, jobs = shop()
    report = jobs["report"]
    with app.testing.fake() as testing:
        async with app.batch(on_complete=report.s("complete"), on_success=report.s("success"),
                             on_death=report.s("death")) as batch:
            await jobs["work"].enqueue(-1)
            await jobs["work"].enqueue(2)
        await testing.drain()
        assert (await app.batch_status(batch.bid)).state == "dead"
    assert [kind for kind, _ in seen if kind != "work"] == ["death", "complete"]


async def test_nothing_fires_before_the_block_exits() -> None:
    app, seen, jobs = shop()
    with app.testing.fake() as testing:
        async with app.batch(on_complete=jobs["report"].s("complete")) as batch:
            await jobs["work"].enqueue(1)
            await testing.drain()  # the member ends while its block is open
            assert seen == [("work", 1)]
            await jobs["work"].enqueue(2)
        await testing.drain()
    assert seen == [("work", 1), ("work", 2), ("complete", batch.bid)]


async def test_inline_runs_the_callbacks_when_the_block_exits() -> None:
    app, seen, jobs = shop()
    with app.testing.inline():
        async with app.batch(on_complete=jobs["report"].s("complete")) as batch:
            await jobs["work"].enqueue(1)
            assert seen == [("work", 1)]
        assert seen == [("work", 1), ("complete", batch.bid)]


async def test_an_exception_cancels_the_members_in_the_fake() -> None:
    app, seen, jobs = shop()
    with app.testing.fake() as testing:
        with pytest.raises(RuntimeError):
            await _fail_inside(app, jobs)
        assert await testing.drain() == []
        assert testing.enqueued() == []
    assert seen == []


async def _fail_inside(app: App, jobs: dict[str, Any]) -> None:
    async with app.batch(on_complete=jobs["report"].s("complete")):
        await jobs["work"].enqueue(1)
        raise RuntimeError("no")


async def test_a_block_inside_another_opens_its_child_in_the_fake() -> None:
    app, seen, jobs = shop()
    report = jobs["report"]
    with app.testing.fake() as testing:
        async with app.batch(on_complete=report.s("outer")) as outer:
            await jobs["work"].enqueue(1)
            async with app.batch(on_complete=report.s("inner")) as inner:
                await jobs["work"].enqueue(2)
        await testing.drain()
        status = await app.batch_status(outer.bid)
        child = await app.batch_status(inner.bid)

    assert [kind for kind, _ in seen if kind in ("outer", "inner")] == ["inner", "outer"]
    assert (status.children, status.total, child.parent, child.total) == (
        [inner.bid], 1, outer.bid, 1)
