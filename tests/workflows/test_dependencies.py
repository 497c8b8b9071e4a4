"""Dependencies and chains end to end: a real worker on a real Redis runs a job only
after its parents succeeded, applies on_parent_failure when one did not, passes results
down a chain — on a single Redis and on a 3-master cluster, with parents and dependents on
queues of different nodes (each waiting job in its own queue's slot, each parent's note in
its own)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import App, current_job
from tests.conftest import url_of_topology
from tests.waiting import wait_until

WAIT = 15.0
QUEUES = ("default", "emails", "reports")

redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)


def shop(make_app: Callable[..., App]) -> tuple[App, list[tuple[str, Any, float]], dict[str, Any]]:
    app = make_app(track_jobs=True, queues=list(QUEUES))
    seen: list[tuple[str, Any, float]] = []
    gates: dict[str, anyio.Event] = {}

    @app.job(name="step", retry=0, keep_result=600)
    async def step(n: int) -> int:
        seen.append(("step", n, time.monotonic()))
        if n < 0:
            raise ValueError(f"bad {n}")
        return n + 1

    @app.job(name="gated", retry=0)
    async def gated(key: str) -> str:
        await gates.setdefault(key, anyio.Event()).wait()
        seen.append(("gated", key, time.monotonic()))
        return key

    @app.job(name="collect", retry=0)
    async def collect(value: Any, tag: str = "") -> None:
        seen.append(("collect", (value, tag, current_job().jid), time.monotonic()))

    return app, seen, {"step": step, "gated": gated, "collect": collect, "gates": gates}


def names(seen: list[tuple[str, Any, float]], kind: str) -> list[Any]:
    return [value for name, value, _ in seen if name == kind]


async def test_a_job_runs_only_after_every_parent_succeeded(
    make_app: Callable[..., App],
) -> None:
    app, seen, jobs = shop(make_app)
    gates = jobs["gates"]
    async with app.worker():
        first = await jobs["gated"].options(queue="emails").enqueue("a")
        second = await jobs["gated"].options(queue="reports").enqueue("b")
        child = await jobs["collect"].options(after=[first, second]).enqueue("child")
        assert (await app.status(child)).state == "waiting"
        gates.setdefault("a", anyio.Event()).set()
        await wait_until(lambda: bool(names(seen, "gated")), timeout=WAIT)
        await anyio.sleep(0)  # the child must not be released by one parent of two
        assert (await app.status(child)).state == "waiting"
        gates.setdefault("b", anyio.Event()).set()
        await wait_until(lambda: bool(names(seen, "collect")), timeout=WAIT)
        await wait_until(lambda: _state_is(app, child, "succeeded"), timeout=WAIT)

    [(value, tag, jid)] = names(seen, "collect")
    assert (value, tag, jid) == ("child", "", child)
    parents_done = max(at for name, _, at in seen if name == "gated")
    assert min(at for name, _, at in seen if name == "collect") >= parents_done


async def _state_is(app: App, jid: str, state: str) -> bool:
    return (await app.status(jid)).state == state


@pytest.mark.parametrize(("policy", "state", "ran"),
                         [("cancel", "cancelled", False), ("dead", "dead", False),
                          ("run", "succeeded", True)])
async def test_a_failed_parent_does_what_on_parent_failure_says(
    make_app: Callable[..., App], policy: str, state: str, ran: bool,
) -> None:
    app, seen, jobs = shop(make_app)
    async with app.worker():
        bad = await jobs["step"].options(queue="emails").enqueue(-1)
        child = await jobs["collect"].options(after=[bad], on_parent_failure=policy,
                                              queue="reports").enqueue("x")
        grandchild = await jobs["collect"].options(after=[child]).enqueue("y")
        await wait_until(lambda: _state_is(app, child, state), timeout=WAIT)
        expected = "succeeded" if ran else "cancelled"
        await wait_until(lambda: _state_is(app, grandchild, expected), timeout=WAIT)

    assert [v[0] for v in names(seen, "collect")] == (["x", "y"] if ran else [])
    if not ran:
        status = await app.status(child)
        assert status.error is not None
        assert bad in status.error
    if policy == "dead":
        store = app._store()
        dead = [json.loads(raw) for raw in await store.client.zrange(store.keys.dead("reports"),
                                                                     0, -1)]
        assert [(entry["jid"], entry["error_class"]) for entry in dead] == [
            (child, "ParentFailed")]


async def test_a_chain_runs_in_order_and_passes_results(make_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(make_app)
    step, collect = jobs["step"], jobs["collect"]
    async with app.worker():
        jids = await app.chain(step.s(1), step.options(queue="emails").s(),
                               step.options(queue="reports").s(), collect.s(tag="end"),
                               pass_result=True).enqueue()
        await wait_until(lambda: bool(names(seen, "collect")), timeout=WAIT)

    assert names(seen, "step") == [1, 2, 3]
    assert names(seen, "collect") == [(4, "end", jids[3])]
    assert len(set(jids)) == 4


async def test_a_chain_stops_at_a_failure(make_app: Callable[..., App]) -> None:
    app, seen, jobs = shop(make_app)
    step, collect = jobs["step"], jobs["collect"]
    async with app.worker():
        jids = await app.chain(step.s(1), step.s(-5), collect.s("never")).enqueue()
        await wait_until(lambda: _state_is(app, jids[2], "cancelled"), timeout=WAIT)

    assert names(seen, "step") == [1, -5]
    assert names(seen, "collect") == []


async def test_a_fan_out_after_one_parent_runs_every_child_once(
    make_app: Callable[..., App],
) -> None:
    app, seen, jobs = shop(make_app)
    async with app.worker():
        parent = await jobs["gated"].enqueue("fan")
        children = await jobs["collect"].options(after=[parent], queue="emails").enqueue_many(
            [((n,), {}) for n in range(10)])
        assert all([(await app.status(jid)).state == "waiting" for jid in children if jid])
        jobs["gates"].setdefault("fan", anyio.Event()).set()
        await wait_until(lambda: len(names(seen, "collect")) == 10, timeout=WAIT)
        await wait_until(lambda: _no_waiting(app), timeout=WAIT)
    assert sorted(value for value, _, _ in names(seen, "collect")) == list(range(10))


async def test_a_parent_that_ended_before_the_child_was_enqueued_releases_it(
    make_app: Callable[..., App],
) -> None:
    app, seen, jobs = shop(make_app)
    async with app.worker():
        done = await jobs["step"].enqueue(1)
        await wait_until(lambda: _state_is(app, done, "succeeded"), timeout=WAIT)
        child = await jobs["collect"].options(after=[done], pass_result=True).enqueue()
        await wait_until(lambda: bool(names(seen, "collect")), timeout=WAIT)
    assert names(seen, "collect") == [(2, "", child)]


async def test_a_refused_after_inside_a_batch_leaves_no_member_behind(
    make_app: Callable[..., App],
) -> None:
    app, seen, jobs = shop(make_app)
    async with app.worker():
        async with app.batch(on_complete=jobs["collect"].s("done")) as batch:
            await jobs["step"].enqueue(1)
            with pytest.raises(ValueError, match="not known"):
                await jobs["collect"].options(after=["no-such-job"]).enqueue("x")
        await wait_until(lambda: bool(names(seen, "collect")), timeout=WAIT)
        status = await app.batch_status(batch.bid)
    assert (status.state, status.total, status.pending) == ("success", 1, 0)


async def test_bad_after_is_refused_at_the_call(make_app: Callable[..., App]) -> None:
    app, _, jobs = shop(make_app)
    collect = jobs["collect"]
    with pytest.raises(ValueError, match="not known"):
        await collect.options(after=["no-such-job"]).enqueue("x")
    with pytest.raises(TypeError, match="list of jids"):
        collect.options(after="one-jid")
    with pytest.raises(ValueError, match="on_parent_failure"):
        collect.options(after=["a"], on_parent_failure="ignore")
    with pytest.raises(ValueError, match="exactly one"):
        collect.options(after=["a", "b"], pass_result=True)
    # A signature missing its first argument is a chain step that takes a result, only.
    with pytest.raises(TypeError, match="missing a required argument"):
        app.batch(on_complete=collect.s(tag="t"))
    with pytest.raises(TypeError, match="missing a required argument"):
        app.chain(jobs["step"].s(1), collect.s())
    with pytest.raises(TypeError, match="too many positional"):
        app.chain(jobs["step"].s(1), jobs["step"].s(2), pass_result=True)
    with pytest.raises(TypeError, match="missing a required argument"):
        app.chain(collect.s(), jobs["step"].s(), pass_result=True)  # the first takes none
    parent = await jobs["step"].enqueue(1)
    with pytest.raises(ValueError, match="enqueue_in"):
        await collect.options(after=[parent]).enqueue_in(10, "x")
    assert await app._store().client.zcard(app._store().keys.waiting("default")) == 0


async def test_cancelling_a_waiting_job_cancels_its_dependents_and_it_never_runs(
    make_app: Callable[..., App],
) -> None:
    app, seen, jobs = shop(make_app)
    gates = jobs["gates"]
    async with app.worker():
        parent = await jobs["gated"].enqueue("p")
        child = await jobs["collect"].options(after=[parent]).enqueue("child")
        grandchild = await jobs["collect"].options(after=[child]).enqueue("grandchild")
        assert await app.cancel(child) == "cancelled"
        await wait_until(lambda: _state_is(app, grandchild, "cancelled"), timeout=WAIT)
        gates.setdefault("p", anyio.Event()).set()
        await wait_until(lambda: _state_is(app, parent, "succeeded"), timeout=WAIT)
        store = app._store()
        await wait_until(lambda: _no_waiting(app), timeout=WAIT)
        assert not await store.client.exists(store.keys.dep("default", child))
    assert names(seen, "collect") == []


async def _no_waiting(app: App) -> bool:
    store = app._store()
    return not any([await store.client.zcard(store.keys.waiting(q)) for q in QUEUES])
