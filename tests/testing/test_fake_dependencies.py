"""Dependencies and chains in the testing fake: the scenarios of
``tests/workflows/test_dependencies.py`` (a real worker on Redis), through ``fake()`` +
``drain()`` and through ``inline()``, with no Redis (the App's URL cannot be reached).

In ``inline()`` every enqueue runs at once, so a parent has usually ended by the time its
child is enqueued; a child waits only for a parent still running — one that enqueues the
job to run after itself — and runs when that parent ends, before its enqueue returns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cogworker_async import App, JobCancelled, current_job

QUEUES = ("default", "emails", "reports")


def shop(offline_app: Callable[..., App]) -> tuple[App, list[tuple[str, Any]], dict[str, Any]]:
    app = offline_app(queues=list(QUEUES))
    seen: list[tuple[str, Any]] = []

    @app.job(name="step", retry=0, keep_result=600)
    async def step(n: int) -> int:
        seen.append(("step", n))
        if n < 0:
            raise ValueError(f"bad {n}")
        return n + 1

    @app.job(name="collect", retry=0)
    async def collect(value: Any, tag: str = "") -> None:
        seen.append(("collect", (value, tag, current_job().jid)))

    @app.job(name="spawn", retry=0)
    async def spawn(fail: bool = False, policy: str = "cancel") -> None:
        """Enqueues a child to run after itself (and a grandchild after the child):
        in ``inline()``, the only way a parent is still running at its child's enqueue."""
        me = current_job().jid
        child = await collect.options(after=[me], on_parent_failure=policy).enqueue("child")
        grandchild = await collect.options(after=[child]).enqueue("grandchild")
        seen.append(("spawned", (child, grandchild, (await app.status(child)).state)))
        if fail:
            raise ValueError("spawn failed")

    return app, seen, {"step": step, "collect": collect, "spawn": spawn}


def names(seen: list[tuple[str, Any]], kind: str) -> list[Any]:
    return [value for name, value in seen if name == kind]


# -- fake() + drain() ---------------------------------------------------------------------


async def test_a_job_runs_only_after_every_parent_succeeded(
        offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    step, collect = jobs["step"], jobs["collect"]
    with app.testing.fake() as testing:
        first = await step.options(queue="emails").enqueue(1)
        second = await step.options(queue="reports").enqueue_in(3600, 2)  # due later
        child = await collect.options(after=[first, second]).enqueue("child")
        assert (await app.status(child)).state == "waiting"
        assert [(e.jid, e.state) for e in testing.enqueued(job=collect)] == [(child, "waiting")]
        await testing.drain()  # the first parent only: one of two releases nothing
        assert names(seen, "step") == [1]
        assert testing.status(child).state == "waiting"
        runs = await testing.drain(include_scheduled=True)
        assert testing.status(child).state == "succeeded"
        assert testing.enqueued() == []

    assert [run.jid for run in runs] == [second, child]  # a child always after its parents
    assert names(seen, "collect") == [("child", "", child)]


@pytest.mark.parametrize(("policy", "state", "ran"),
                         [("cancel", "cancelled", False), ("dead", "dead", False),
                          ("run", "succeeded", True)])
async def test_a_failed_parent_does_what_on_parent_failure_says(
        offline_app: Callable[..., App], policy: str, state: str, ran: bool) -> None:
    app, seen, jobs = shop(offline_app)
    collect = jobs["collect"]
    with app.testing.fake() as testing:
        bad = await jobs["step"].options(queue="emails").enqueue(-1)
        child = await collect.options(after=[bad], on_parent_failure=policy,
                                      queue="reports").enqueue("x")
        grandchild = await collect.options(after=[child]).enqueue("y")
        runs = await testing.drain()
        status = testing.status(child)
        assert status.state == state
        assert testing.status(grandchild).state == ("succeeded" if ran else "cancelled")

    assert [v[0] for v in names(seen, "collect")] == (["x", "y"] if ran else [])
    if not ran:
        assert status.error == f"ParentFailed: parent {bad} dead"
        assert (status.queue, status.name) == ("reports", "collect")
        assert [run.jid for run in runs] == [bad]  # ended unrun: no run of its own
        assert testing.status(grandchild).error == f"ParentFailed: parent {child} {state}"


@pytest.mark.parametrize(("fail", "ran"), [(False, ["child", "grandchild"]), (True, [])])
async def test_drain_runs_a_child_its_running_parent_enqueued_after_the_parent(
        offline_app: Callable[..., App], fail: bool, ran: list[str]) -> None:
    app, seen, jobs = shop(offline_app)
    with app.testing.fake() as testing:
        parent = await jobs["spawn"].enqueue(fail=fail)
        runs = await testing.drain()
    [(child, grandchild, state)] = names(seen, "spawned")
    assert state == "waiting"
    assert [run.jid for run in runs] == [parent, child, grandchild][:1 + len(ran)]
    assert [v[0] for v in names(seen, "collect")] == ran


async def test_a_chain_runs_in_order_and_passes_results(
        offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    step, collect = jobs["step"], jobs["collect"]
    with app.testing.fake() as testing:
        jids = await app.chain(step.s(1), step.options(queue="emails").s(),
                               step.options(queue="reports").s(), collect.s(tag="end"),
                               pass_result=True).enqueue()
        assert [testing.status(jid).state for jid in jids] == ["queued"] + ["waiting"] * 3
        runs = await testing.drain()
        assert await app.result(jids[2]) == 4

    assert [run.jid for run in runs] == jids
    assert [run.queue for run in runs] == ["default", "emails", "reports", "default"]
    assert names(seen, "step") == [1, 2, 3]
    assert names(seen, "collect") == [(4, "end", jids[3])]
    assert len(set(jids)) == 4


async def test_a_chain_stops_at_a_failure(offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    step = jobs["step"]
    with app.testing.fake() as testing:
        jids = await app.chain(step.s(1), step.s(-5), jobs["collect"].s("never")).enqueue()
        await testing.drain()
        assert testing.status(jids[2]).state == "cancelled"
        with pytest.raises(JobCancelled):
            await app.result(jids[2])

    assert names(seen, "step") == [1, -5]
    assert names(seen, "collect") == []


async def test_a_parent_that_ended_before_the_child_was_enqueued_releases_it(
        offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    with app.testing.fake() as testing:
        done = await jobs["step"].enqueue(1)
        await testing.drain()
        child = await jobs["collect"].options(after=[done], pass_result=True).enqueue()
        assert testing.status(child).state == "queued"  # released at once
        (queued,) = testing.enqueued()
        assert queued.args == [2]  # the parent's result, in place
        await testing.drain()
    assert names(seen, "collect") == [(2, "", child)]


async def test_a_parent_that_kept_no_result_files_the_child_dead(
        offline_app: Callable[..., App]) -> None:
    """As dep_apply.lua: never run with None for a result it was promised (issue 40,
    defect 15)."""
    app, seen, jobs = shop(offline_app)
    collect = jobs["collect"]
    with app.testing.fake() as testing:
        parent = await collect.enqueue("p")  # keeps no result
        child = await collect.options(after=[parent], pass_result=True).enqueue(tag="c")
        await testing.drain()
        status = await app.status(child)
    assert names(seen, "collect") == [("p", "", parent)]
    assert status.state == "dead"
    assert status.error is not None
    assert "ParentResultMissing" in status.error


async def test_bad_after_is_refused_at_the_call(offline_app: Callable[..., App]) -> None:
    app, _, jobs = shop(offline_app)
    collect = jobs["collect"]
    with app.testing.fake() as testing:
        with pytest.raises(ValueError, match="not known"):
            await collect.options(after=["no-such-job"]).enqueue("x")
        parent = await jobs["step"].enqueue(1)
        with pytest.raises(ValueError, match="enqueue_in"):
            await collect.options(after=[parent]).enqueue_in(10, "x")
        assert [e.jid for e in testing.enqueued()] == [parent]


async def test_cancelling_a_waiting_job_cancels_its_dependents_and_it_never_runs(
        offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    collect = jobs["collect"]
    with app.testing.fake() as testing:
        parent = await jobs["step"].enqueue(1)
        child = await collect.options(after=[parent]).enqueue("child")
        grandchild = await collect.options(after=[child]).enqueue("grandchild")
        assert await app.cancel(child) == "cancelled"
        assert await app.cancel(child) == "finished"
        assert testing.status(child).state == "cancelled"
        assert testing.status(grandchild).state == "cancelled"
        assert testing.status(grandchild).error == f"ParentFailed: parent {child} cancelled"
        runs = await testing.drain()
        assert testing.status(parent).state == "succeeded"
        assert testing.enqueued() == []

    assert [run.jid for run in runs] == [parent]
    assert names(seen, "collect") == []


async def test_a_fan_out_after_one_parent_runs_every_child_once(
        offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    with app.testing.fake() as testing:
        parent = await jobs["step"].enqueue(1)
        children = await jobs["collect"].options(after=[parent], queue="emails").enqueue_many(
            [((n,), {}) for n in range(10)])
        assert {testing.status(jid).state for jid in children if jid} == {"waiting"}
        await testing.drain()
    assert [value for value, _, _ in names(seen, "collect")] == list(range(10))


async def test_a_chosen_jid_that_is_alive_is_refused(offline_app: Callable[..., App]) -> None:
    app, _, jobs = shop(offline_app)
    collect = jobs["collect"].options(jid="report-1")
    with app.testing.fake() as testing:
        parent = await jobs["step"].enqueue(1)
        assert await collect.options(after=[parent]).enqueue("a") == "report-1"
        assert await collect.options(after=[parent]).enqueue("b") is None  # waiting
        assert await collect.enqueue("c") is None
        await testing.drain()
        assert await collect.options(after=[parent]).enqueue("d") == "report-1"  # ended
        assert [e.args for e in testing.enqueued()] == [["d"]]


async def test_a_waiting_member_tells_its_batch(offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    collect = jobs["collect"]
    with app.testing.fake() as testing:
        bad = await jobs["step"].enqueue(-1)
        good = await jobs["step"].enqueue(1)
        async with app.batch(on_complete=collect.s("complete")) as batch:
            cancelled = await collect.options(after=[bad]).enqueue("unrun")
            released = await collect.options(after=[good]).enqueue("ran")
        await testing.drain()
        status = await app.batch_status(batch.bid)

    assert (status.state, status.total, status.succeeded, status.cancelled) == \
        ("complete", 2, 1, 1)
    assert testing.status(cancelled).state == "cancelled"
    assert [v[:2] for v in names(seen, "collect")] == [("ran", ""), ("complete", "")]
    assert names(seen, "collect")[0][2] == released


# -- inline() ------------------------------------------------------------------------------


async def test_inline_a_child_waits_for_its_running_parent_and_runs_when_it_ends(
        offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    with app.testing.inline() as testing:
        parent = await jobs["spawn"].enqueue()
        [(child, grandchild, state)] = names(seen, "spawned")
        assert state == "waiting"
        assert [run.jid for run in testing.runs()] == [parent, child, grandchild]

    assert names(seen, "collect") == [("child", "", child), ("grandchild", "", grandchild)]


async def test_inline_a_job_whose_parents_succeeded_runs_at_once(
        offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    step, collect = jobs["step"], jobs["collect"]
    with app.testing.inline() as testing:
        first = await step.options(queue="emails").enqueue(1)
        second = await step.options(queue="reports").enqueue(2)
        child = await collect.options(after=[first, second]).enqueue("child")
        assert testing.status(child).state == "succeeded"
        assert testing.enqueued() == []
    assert names(seen, "collect") == [("child", "", child)]


@pytest.mark.parametrize(("policy", "state", "ran"),
                         [("cancel", "cancelled", False), ("dead", "dead", False),
                          ("run", "succeeded", True)])
async def test_inline_a_failed_parent_does_what_on_parent_failure_says(
        offline_app: Callable[..., App], policy: str, state: str, ran: bool) -> None:
    app, seen, jobs = shop(offline_app)
    collect = jobs["collect"]
    with app.testing.inline() as testing:
        with pytest.raises(ValueError, match="bad -1"):
            await jobs["step"].options(jid="bad").enqueue(-1)
        child = await collect.options(after=["bad"], on_parent_failure=policy).enqueue("x")
        grandchild = await collect.options(after=[child]).enqueue("y")
        assert testing.status(child).state == state
        assert testing.status(grandchild).state == ("succeeded" if ran else "cancelled")
        if not ran:
            assert testing.status(child).error == "ParentFailed: parent bad dead"
    assert [v[0] for v in names(seen, "collect")] == (["x", "y"] if ran else [])


@pytest.mark.parametrize(("policy", "ran"), [("cancel", []), ("run", ["child", "grandchild"])])
async def test_inline_a_parent_failing_after_its_child_was_enqueued(
        offline_app: Callable[..., App], policy: str, ran: list[str]) -> None:
    app, seen, jobs = shop(offline_app)
    with app.testing.inline() as testing:
        with pytest.raises(ValueError, match="spawn failed"):  # the parent's error, still
            await jobs["spawn"].enqueue(fail=True, policy=policy)
        [(child, grandchild, _)] = names(seen, "spawned")
        assert testing.status(child).state == ("succeeded" if ran else "cancelled")
        assert testing.status(grandchild).state == ("succeeded" if ran else "cancelled")
    assert [v[0] for v in names(seen, "collect")] == ran


async def test_inline_a_chain_runs_in_order_and_passes_results(
        offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    step, collect = jobs["step"], jobs["collect"]
    with app.testing.inline() as testing:
        jids = await app.chain(step.s(1), step.options(queue="emails").s(),
                               step.options(queue="reports").s(), collect.s(tag="end"),
                               pass_result=True).enqueue()
        assert [run.jid for run in testing.runs()] == jids
        assert await app.result(jids[2]) == 4
    assert names(seen, "step") == [1, 2, 3]
    assert names(seen, "collect") == [(4, "end", jids[3])]


async def test_inline_a_chain_stops_at_a_failure(offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    step = jobs["step"]
    with app.testing.inline() as testing:
        with pytest.raises(ValueError, match="bad -5"):  # what the step raised
            await app.chain(step.s(1), step.s(-5), jobs["collect"].s("never")).enqueue()
        assert [run.outcome for run in testing.runs()] == ["succeeded", "dead"]
    assert names(seen, "step") == [1, -5]
    assert names(seen, "collect") == []


async def test_inline_a_parent_that_ended_before_releases_its_child_at_once(
        offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    with app.testing.inline():
        done = await jobs["step"].enqueue(1)
        child = await jobs["collect"].options(after=[done], pass_result=True).enqueue()
    assert names(seen, "collect") == [(2, "", child)]


async def test_inline_bad_after_is_refused_at_the_call(offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    with app.testing.inline() as testing:
        with pytest.raises(ValueError, match="not known"):
            await jobs["collect"].options(after=["no-such-job"]).enqueue("x")
        assert testing.runs() == []
    assert seen == []


async def test_inline_cancelling_a_waiting_job_cancels_its_dependents(
        offline_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(offline_app)
    collect = jobs["collect"]
    cancelled: list[str] = []

    @app.job(name="cancels", retry=0)
    async def cancels() -> None:
        child = await collect.options(after=[current_job().jid]).enqueue("child")
        grandchild = await collect.options(after=[child]).enqueue("grandchild")
        cancelled.extend([child, grandchild, await app.cancel(child)])

    with app.testing.inline() as testing:
        parent = await cancels.enqueue()
        child, grandchild, answer = cancelled
        assert answer == "cancelled"
        assert testing.status(parent).state == "succeeded"
        assert testing.status(child).state == "cancelled"
        assert testing.status(grandchild).state == "cancelled"
        assert [run.jid for run in testing.runs()] == [parent]
    assert names(seen, "collect") == []
