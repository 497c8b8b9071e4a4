"""Dependencies, chains and callbacks at their edges (issue 40, defects 6, 17): what can
never work is refused at the call, before anything is written; what is written always
ends — a job never waits for itself, a chain is never half enqueued."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from cogworker_async import App
from cogworker_async.worker.notes_relay import UNSERVED_EVERY
from tests.waiting import wait_until

WAIT = 15.0


def shop(make_app: Callable[..., App]) -> tuple[App, dict[str, Any]]:
    app = make_app(track_jobs=True, queues=["default", "emails"])

    @app.job(name="step", retry=0, keep_result=600)
    async def step(n: int) -> int:
        return n + 1

    @app.job(name="collect", retry=0)
    async def collect(value: Any, tag: str = "") -> None:
        return None

    @app.job(name="solo", retry=0, unique="until_executed")
    async def solo(n: int) -> int:
        return n

    return app, {"step": step, "collect": collect, "solo": solo}


async def _nothing_written(app: App) -> bool:
    """No job queued or waiting in the namespace's queues."""
    store = app._store()
    for queue in ("default", "emails"):
        if await store.client.llen(store.keys.queue(queue)) or \
                await store.client.zcard(store.keys.waiting(queue)):
            return False
    return True


# -- defect 6: a job that waits for itself -------------------------------------------


async def test_a_job_after_its_own_jid_is_refused(make_app: Callable[..., App]) -> None:
    app, jobs = shop(make_app)
    async with app.worker():  # a finished run of that jid: a parent that can be named
        await jobs["step"].options(jid="self-loop").enqueue(1)
        await wait_until(lambda: _state_is(app, "self-loop", "succeeded"), timeout=WAIT)
    with pytest.raises(ValueError, match="itself"):
        await jobs["collect"].options(jid="self-loop", after=["self-loop"]).enqueue("x")
    assert (await app.status("self-loop")).state == "succeeded"
    assert await _nothing_written(app)


async def _state_is(app: App, jid: str, state: str) -> bool:
    return (await app.status(jid)).state == state


async def test_a_chain_whose_steps_wait_for_each_other_is_refused(
    make_app: Callable[..., App],
) -> None:
    app, jobs = shop(make_app)
    step = jobs["step"]
    # step 1 names step 2's jid: step 2 runs after step 1, which waits for step 2
    with pytest.raises(ValueError, match=r"chain step 1.*step 2"):
        app.chain(step.options(jid="a", after=["b"]).s(1), step.options(jid="b").s(2))
    with pytest.raises(ValueError, match=r"chain step 2.*itself"):
        app.chain(step.s(1), step.options(jid="b", after=["b"]).s(2))
    with pytest.raises(ValueError, match=r"chain step 3.*twice"):
        app.chain(step.options(jid="a").s(1), step.s(2), step.options(jid="a").s(3))
    assert await _nothing_written(app)


# -- defect 17: what a callback or a chain could never carry -------------------------


@pytest.mark.parametrize(("option", "value"), [
    ("throttle", 5.0), ("debounce", 5.0), ("coalesce", True), ("jid", "chosen"),
    ("pass_result", True)])
async def test_a_callback_with_an_option_it_cannot_carry_is_refused(
    make_app: Callable[..., App], option: str, value: object,
) -> None:
    app, jobs = shop(make_app)
    extra: dict[str, Any] = {"after": ["p"]} if option == "pass_result" else {}
    sig = jobs["collect"].options(**{option: value}, **extra).s("x")
    with pytest.raises((TypeError, ValueError), match=rf"on_complete.*{option}"):
        app.batch(on_complete=sig)
    with pytest.raises(ValueError, match=r"on_death.*unique"):
        app.batch(on_death=jobs["solo"].s(1))


async def test_a_callback_keeps_its_expiry(make_app: Callable[..., App]) -> None:
    app, jobs = shop(make_app)
    async with app.worker():  # serves its queues: the callback waits on another one
        async with app.batch(on_complete=jobs["collect"].options(
                queue="unserved", expires_in=60, dead_on_expiry=False).s("x")) as batch:
            await jobs["step"].enqueue(1)
        store = app._store()
        await wait_until(lambda: _queued(app, "unserved"), timeout=WAIT)
    [raw] = await store.client.lrange(store.keys.queue("unserved"), 0, -1)
    payload = json.loads(raw)
    assert payload["jid"] == f"{batch.bid}-complete"
    assert time.time() + 50 < payload["expires_at"] <= time.time() + 61
    assert payload.get("dead_on_expiry") is False


async def _queued(app: App, queue: str) -> bool:
    store = app._store()
    return bool(await store.client.llen(store.keys.queue(queue)))


@pytest.mark.parametrize(("options", "match"), [
    ({"throttle": 5.0}, r"chain step 2.*throttle"),
    ({"debounce": 5.0}, r"chain step 2.*debounce"),
    ({"coalesce": True}, r"chain step 2.*coalesce")])
async def test_a_chain_step_that_cannot_be_chained_is_refused(
    make_app: Callable[..., App], options: dict[str, Any], match: str,
) -> None:
    app, jobs = shop(make_app)
    step = jobs["step"]
    with pytest.raises((TypeError, ValueError), match=match):
        app.chain(step.s(1), step.options(**options).s(2))
    with pytest.raises((TypeError, ValueError), match=match.replace("2", "1")):
        app.chain(step.options(**options).s(1), step.s(2))
    with pytest.raises(ValueError, match=r"chain step 2.*unique"):
        await app.chain(step.s(1), jobs["solo"].s(2)).enqueue()
    assert await _nothing_written(app)


async def test_a_chain_step_with_its_own_after_under_pass_result_is_refused(
    make_app: Callable[..., App],
) -> None:
    app, jobs = shop(make_app)
    step = jobs["step"]
    parent = await step.enqueue(0)
    with pytest.raises(ValueError, match=r"chain step 2.*after="):
        app.chain(step.s(1), step.options(after=[parent]).s(), pass_result=True)
    store = app._store()
    assert await store.client.llen(store.keys.queue("default")) == 1  # the parent only


async def test_a_chain_on_an_untracked_app_is_refused_before_any_step(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=False)

    @app.job(name="step", retry=0)
    async def step(n: int) -> int:
        return n

    with pytest.raises(Exception, match="track_jobs"):
        app.chain(step.s(1), step.s(2))
    store = app._store()
    assert await store.client.llen(store.keys.queue("default")) == 0


# -- defect 4: a parent queued longer than the records' bound ------------------------


async def test_a_parent_queued_past_the_records_bound_still_releases_its_dependents(
    make_app: Callable[..., App],
) -> None:
    """A queue paused longer than a live record's bound (14 days, shortened here by
    ageing the record): the sweep must not drop what notes the parent's end."""
    app, jobs = shop(make_app)
    store = app._store()
    parent = await jobs["step"].options(queue="later").enqueue(1)  # nobody serves it yet
    child = await jobs["collect"].options(after=[parent], pass_result=True).enqueue()
    live = store.keys.live_records("later")
    parts = (await store.client.hget(live, parent)).decode().split("\t")
    parts[3] = "1000"  # its bound long passed
    await store.client.hset(live, parent, "\t".join(parts))
    await store.sweep_records("later")
    async with app.worker(queues=["later", "default"]):
        await wait_until(lambda: _state_is(app, child, "succeeded"), timeout=WAIT)


async def test_a_cleared_parents_record_is_not_kept_for_ever_by_its_watchers(
    make_app: Callable[..., App],
) -> None:
    """A parent queued on an unserved queue, a dependent after it; the queue is cleared:
    the parent is gone and no move of it will ever come. Past its bound its record must
    not be renewed at each sweep for as long as its watchers set names someone (14 days,
    then 14 more, for good): it is closed cancelled, and the dependent hears that end
    (on_parent_failure: "cancel" by default)."""
    from cogworker_async.admin import Inspector

    app, jobs = shop(make_app)
    parent = await jobs["step"].options(queue="parked").enqueue(1)
    child = await jobs["collect"].options(after=[parent]).enqueue("c")
    assert await Inspector(app).queue("parked").clear() == 1
    store = app._store()
    live = store.keys.live_records("parked")
    for _ in range(3):  # three sweeps, each past the record's bound
        text = await store.client.hget(live, parent)
        assert isinstance(text, bytes)
        parts = text.decode().split("\t")
        parts[3] = "1000"  # its ``until`` long passed
        await store.client.hset(live, parent, "\t".join(parts))
        await store.sweep_records("parked")
        if not await store.client.hexists(live, parent):
            break
    else:
        raise AssertionError("the vanished parent's record was renewed at every sweep: "
                             f"{(await store.client.hget(live, parent))!r}")
    assert (await app.status(parent)).state == "cancelled"
    async with app.worker(queues=["parked", "default"]):  # served now: its sweep's queue
        await wait_until(lambda: _state_is(app, child, "cancelled"), timeout=WAIT)


async def test_a_vanished_parent_on_a_queue_no_worker_serves_still_ends_its_dependents(
    make_app: Callable[..., App],
) -> None:
    """No worker serves "parked" (so no upkeep sweeps it): the relay of unserved queues
    sweeps it, closes the vanished parent and tells its dependent."""
    from cogworker_async.admin import Inspector

    app, jobs = shop(make_app)
    parent = await jobs["step"].options(queue="parked").enqueue(1)
    await jobs["step"].options(queue="parked").enqueue_in(3600, 2)  # keeps its name
    child = await jobs["collect"].options(after=[parent]).enqueue("c")
    assert await Inspector(app).queue("parked").clear() == 1
    store = app._store()
    live = store.keys.live_records("parked")
    parts = (await store.client.hget(live, parent)).decode().split("\t")
    parts[3] = "1000"  # its bound long passed
    await store.client.hset(live, parent, "\t".join(parts))
    async with app.worker(queues=["default"]):  # its sweep, then its note: 2 passes
        await wait_until(lambda: _state_is(app, child, "cancelled"),
                         timeout=WAIT + 2 * UNSERVED_EVERY)
    assert (await app.status(parent)).state == "cancelled"


async def test_a_parent_on_a_paused_queue_with_jobs_keeps_its_record_past_its_bound(
    make_app: Callable[..., App],
) -> None:
    """The sweep closes a watched record only when its job can no longer move: a parent
    still on its (paused) queue's list is kept, and its dependent runs after it."""
    from cogworker_async.admin import Inspector

    app, jobs = shop(make_app)
    await Inspector(app).queues.pause("parked")
    parent = await jobs["step"].options(queue="parked").enqueue(1)
    child = await jobs["collect"].options(after=[parent], pass_result=True).enqueue()
    store = app._store()
    live = store.keys.live_records("parked")
    parts = (await store.client.hget(live, parent)).decode().split("\t")
    parts[3] = "1000"
    await store.client.hset(live, parent, "\t".join(parts))
    assert await store.sweep_records("parked") == ("0", 0)
    assert (await app.status(parent)).state == "queued"
    await Inspector(app).queues.resume("parked")
    async with app.worker(queues=["parked", "default"]):
        await wait_until(lambda: _state_is(app, child, "succeeded"), timeout=WAIT)


# -- defect 15: pass_result with no result to pass -----------------------------------


async def test_a_parent_that_kept_no_result_is_refused_at_the_call_or_fails_the_child(
    make_app: Callable[..., App],
) -> None:
    app, jobs = shop(make_app)

    @app.job(name="forgetful", retry=0)
    async def forgetful() -> int:
        return 41

    async with app.worker():
        done = await forgetful.enqueue()
        await wait_until(lambda: _state_is(app, done, "succeeded"), timeout=WAIT)
        with pytest.raises(ValueError, match=rf"{done}.*no result"):
            await jobs["collect"].options(after=[done], pass_result=True).enqueue()
        late = await forgetful.options(queue="later").enqueue()
        child = await jobs["collect"].options(after=[late], pass_result=True).enqueue()
    async with app.worker(queues=["later", "default"]):
        await wait_until(lambda: _state_is(app, child, "dead"), timeout=WAIT)
    status = await app.status(child)
    assert status.error is not None
    assert "ParentResultMissing" in status.error
    assert child in status.error
    assert late in status.error
    store = app._store()
    [entry] = await store.client.zrange(store.keys.dead("default"), 0, -1)
    assert json.loads(entry)["args"] == [None]  # readable, not "?"


async def test_a_result_too_large_for_the_child_fails_it_saying_so(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True, max_payload_bytes=4000)

    @app.job(name="big", retry=0, keep_result=600)
    async def big() -> str:
        return "y" * 3000

    @app.job(name="take", retry=0)
    async def take(value: str, extra: str) -> None:
        return None

    async with app.worker():
        parent = await big.enqueue()
        child = await take.options(after=[parent], pass_result=True).enqueue("z" * 1500)
        await wait_until(lambda: _state_is(app, child, "dead"), timeout=WAIT)
    status = await app.status(child)
    assert status.error is not None
    assert "ParentResultTooLarge" in status.error
    store = app._store()
    [entry] = await store.client.zrange(store.keys.dead("default"), 0, -1)
    payload = json.loads(entry)
    assert (payload["class"], payload["args"][0]) == ("take", None)


async def test_the_fake_fails_a_child_whose_parent_kept_no_result_too(
    make_app: Callable[..., App],
) -> None:
    app, jobs = shop(make_app)

    @app.job(name="forgetful", retry=0)
    async def forgetful() -> int:
        return 41

    with app.testing.fake() as fake:
        parent = await forgetful.enqueue()
        child = await jobs["collect"].options(after=[parent], pass_result=True).enqueue()
        await fake.drain()
        status = await app.status(child)
    assert status.state == "dead"
    assert status.error is not None
    assert "ParentResultMissing" in status.error

