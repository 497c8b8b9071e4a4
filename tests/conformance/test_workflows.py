"""Workflows, the same on Redis and in the fake: a batch's callbacks fire once, after its
members; a job that waits for its parents (``after=``, chains) runs after them, and what
it does when one fails is its ``on_parent_failure``."""

from __future__ import annotations

from typing import Any

import pytest

from cogworker_async import App
from cogworker_async.enqueue.handles import JobFunction
from tests.conformance.conftest import Backend


def _steps(app: App, ran: list[str]) -> tuple[JobFunction[[str], Any], JobFunction[[str], Any]]:
    @app.job(retry=False)
    async def step(tag: str) -> str:
        ran.append(tag)
        return tag

    @app.job(retry=False)
    async def broken(tag: str) -> None:
        ran.append(tag)
        raise RuntimeError(f"{tag} broke")

    return step, broken


async def test_a_batch_fires_its_callbacks_once_after_its_members(backend: Backend) -> None:
    app = backend.app(concurrency=2)
    ran: list[str] = []
    step, _ = _steps(app, ran)

    @app.job
    async def report(kind: str) -> None:
        ran.append(f"report {kind}")

    async with app.batch(on_complete=report.s("complete"),
                         on_success=report.s("success")) as batch:
        for n in range(3):
            await step.enqueue(f"member {n}")
    await backend.run(app, until=lambda: len(ran) == 5)
    assert sorted(ran[:3]) == ["member 0", "member 1", "member 2"]
    assert sorted(ran[3:]) == ["report complete", "report success"]
    assert (await app.batch_status(batch.bid)).state == "success"


async def test_a_batch_with_a_dead_member_fires_on_death_not_on_success(
        backend: Backend) -> None:
    app = backend.app(concurrency=1)
    ran: list[str] = []
    step, broken = _steps(app, ran)

    @app.job
    async def report(kind: str) -> None:
        ran.append(f"report {kind}")

    async with app.batch(on_death=report.s("death"), on_success=report.s("success"),
                         on_complete=report.s("complete")) as batch:
        await step.enqueue("fine")
        await broken.enqueue("bad")
    await backend.run(app, until=lambda: "report complete" in ran and "report death" in ran)
    assert "report success" not in ran
    assert (await app.batch_status(batch.bid)).state == "dead"


async def test_a_job_after_its_parents_runs_once_they_succeeded(backend: Backend) -> None:
    app = backend.app(concurrency=2)
    ran: list[str] = []
    step, _ = _steps(app, ran)
    first = await step.enqueue("parent 1")
    second = await step.enqueue("parent 2")
    assert first is not None
    assert second is not None
    child = await step.options(after=[first, second]).enqueue("child")
    assert child is not None
    assert (await app.status(child)).state == "waiting"
    await backend.run(app, until=lambda: "child" in ran)
    assert ran[-1] == "child"
    assert sorted(ran[:2]) == ["parent 1", "parent 2"]


async def test_a_chain_runs_in_order(backend: Backend) -> None:
    app = backend.app(concurrency=3)
    ran: list[str] = []
    step, _ = _steps(app, ran)
    jids = await app.chain(step.s("a"), step.s("b"), step.s("c")).enqueue()
    await backend.run(app, until=lambda: len(ran) == 3)
    assert ran == ["a", "b", "c"]
    assert [(await app.status(jid)).state for jid in jids] == ["succeeded"] * 3


@pytest.mark.parametrize(("policy", "child_state", "child_ran"), [
    ("cancel", "cancelled", False), ("run", "succeeded", True), ("dead", "dead", False)])
async def test_on_parent_failure(backend: Backend, policy: str, child_state: str,
                                 child_ran: bool) -> None:
    app = backend.app(concurrency=1)
    ran: list[str] = []
    step, broken = _steps(app, ran)
    parent = await broken.enqueue("parent")
    assert parent is not None
    child = await step.options(after=[parent], on_parent_failure=policy).enqueue("child")
    assert child is not None

    async def child_ended() -> bool:
        return (await app.status(child)).state == child_state

    await backend.run(app, until=child_ended)
    assert ("child" in ran) is child_ran
    error = (await app.status(child)).error or ""
    if policy != "run":
        assert "ParentFailed" in error
        assert parent in error


async def test_a_refused_duplicate_leaves_its_batch(backend: Backend) -> None:
    app = backend.app(concurrency=1)
    ran: list[str] = []

    @app.job(unique=True)
    async def sync(account: int) -> None:
        ran.append(f"sync {account}")

    @app.job
    async def report() -> None:
        ran.append("report")

    async with app.batch(on_success=report.s()) as batch:
        assert await sync.enqueue(1) is not None
        assert await sync.enqueue(1) is None
        many = await sync.enqueue_many([((1,), {}), ((2,), {})])
        assert many[0] is None
        assert many[1] is not None
    await backend.run(app, until=lambda: "report" in ran)
    found = await app.batch_status(batch.bid)
    assert (found.state, found.total, found.succeeded) == ("success", 2, 2)
    assert ran == ["sync 1", "sync 2", "report"]


async def test_cancelling_a_parent_cancels_the_jobs_waiting_for_it(backend: Backend) -> None:
    app = backend.app(concurrency=1)
    ran: list[str] = []
    step, _ = _steps(app, ran)
    parent = await step.enqueue_in(60, "parent")
    assert parent is not None
    child = await step.options(after=[parent]).enqueue("child")
    assert child is not None
    grandchild = await step.options(after=[child]).enqueue("grandchild")
    assert grandchild is not None
    other = await step.enqueue("other")
    assert await app.cancel(parent) == "cancelled"

    async def cascaded() -> bool:
        return (await app.status(grandchild)).state == "cancelled"

    await backend.run(app, until=cascaded)
    assert (await app.status(child)).state == "cancelled"
    assert ran == ["other"]
    assert other is not None


async def test_cancel_batch_cancels_its_waiting_members(backend: Backend) -> None:
    app = backend.app(concurrency=1)
    ran: list[str] = []
    step, _ = _steps(app, ran)

    @app.job
    async def report(kind: str) -> None:
        ran.append(f"report {kind}")

    async with app.batch(on_complete=report.s("complete"),
                         on_success=report.s("success")) as batch:
        for n in range(3):
            await step.enqueue_in(60, f"member {n}")
    assert await app.cancel_batch(batch.bid) == 3
    await backend.run(app, until=lambda: "report complete" in ran)
    assert ran == ["report complete"]
    assert (await app.batch_status(batch.bid)).state == "complete"


async def test_a_parent_batch_ends_after_its_child(backend: Backend) -> None:
    app = backend.app(concurrency=1)
    ran: list[str] = []
    step, _ = _steps(app, ran)

    @app.job
    async def report(kind: str) -> None:
        ran.append(f"report {kind}")

    async with app.batch(on_success=report.s("parent")) as parent:
        await step.enqueue("parent's member")
        async with app.batch(parent=parent.bid, on_success=report.s("child")) as child:
            await step.enqueue("child's member")
    await backend.run(app, until=lambda: "report parent" in ran)
    assert sorted(ran[:2]) == ["child's member", "parent's member"]
    assert sorted(ran[2:]) == ["report child", "report parent"]
    assert (await app.batch_status(child.bid)).state == "success"
    assert (await app.batch_status(parent.bid)).state == "success"
