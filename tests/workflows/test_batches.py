"""Batches end to end: a real worker on a real Redis runs the members, relays their
ends, and enqueues each callback once — on a single Redis and on a 3-master cluster,
with members on queues of different nodes (the batch's keys in the namespace's slot,
each member's note in its own queue's)."""

from __future__ import annotations

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


class Calls:
    """What the jobs saw, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def of(self, name: str) -> list[Any]:
        return [value for kind, value in self.seen if kind == name]


async def relayed(app: App, queues: tuple[str, ...] = QUEUES) -> bool:
    """Nothing left for the relay: no member's end waits to be applied and no batch has a
    callback to enqueue (after this, no callback can fire any more)."""
    store = app._store()
    notes = [await store.client.llen(store.keys.batch_notes(q)) for q in queues]
    return not any(notes) and await store.client.zcard(store.keys.batches_firing) == 0


def shop(make_app: Callable[..., App]) -> tuple[App, Calls, dict[str, Any]]:
    app = make_app(track_jobs=True, queues=list(QUEUES))
    calls = Calls()
    gates: dict[str, anyio.Event] = {}

    @app.job(name="work", retry=0)
    async def work(n: int) -> int:
        calls.seen.append(("work", n))
        if n < 0:
            raise ValueError(f"bad {n}")
        return n * 10

    @app.job(name="gated", retry=0)
    async def gated(key: str) -> None:
        await gates.setdefault(key, anyio.Event()).wait()
        calls.seen.append(("gated", key))

    @app.job(name="report", retry=0)
    async def report(kind: str) -> None:
        calls.seen.append((kind, current_job().batch_id))

    @app.job(name="spawn", retry=0)
    async def spawn(count: int) -> None:
        async with app.batch("inner", on_complete=report.s("inner-complete")):
            for i in range(count):
                await work.enqueue(100 + i)
        calls.seen.append(("spawned", current_job().batch_id))

    @app.job(name="spawn_and_fail", retry=0)
    async def spawn_and_fail() -> None:
        async with app.batch("doomed child", on_complete=report.s("child-complete")):
            await work.enqueue_in(3600, 1)
            raise RuntimeError("the child's block fails")

    @app.job(name="next_stage", retry=0)
    async def next_stage(kind: str) -> None:  # a callback that starts the next batch
        async with app.batch("stage two", on_complete=report.s("stage-two")):
            await work.enqueue(7)
        calls.seen.append((kind, current_job().batch_id))

    return app, calls, {"work": work, "gated": gated, "report": report, "spawn": spawn,
                        "spawn_and_fail": spawn_and_fail, "next_stage": next_stage,
                        "gates": gates}


async def test_a_batch_that_all_succeeds_calls_complete_and_success_once(
    make_app: Callable[..., App],
) -> None:
    app, calls, jobs = shop(make_app)
    report = jobs["report"]
    async with app.worker():
        async with app.batch("five", on_complete=report.s("complete"),
                             on_success=report.s("success"),
                             on_death=report.s("death")) as batch:
            for n in range(3):  # one on each queue: on a cluster, three nodes
                await jobs["work"].options(queue=QUEUES[n]).enqueue(n)
            await jobs["work"].options(queue="reports").enqueue_many([((3,), {}), ((4,), {})])
        await wait_until(lambda: bool(calls.of("complete") and calls.of("success")), timeout=WAIT)
        status = await app.batch_status(batch.bid)
        await wait_until(lambda: relayed(app), timeout=WAIT)

    assert calls.of("complete") == [batch.bid]
    assert calls.of("success") == [batch.bid]
    assert calls.of("death") == []
    assert sorted(calls.of("work")) == [0, 1, 2, 3, 4]
    assert (status.state, status.total, status.succeeded, status.pending) == ("success", 5, 5, 0)
    assert status.description == "five"
    assert status.callbacks == {"complete": f"{batch.bid}-complete",
                                "success": f"{batch.bid}-success"}


async def test_a_death_calls_on_death_once_and_complete_but_never_success(
    make_app: Callable[..., App],
) -> None:
    app, calls, jobs = shop(make_app)
    report = jobs["report"]
    async with app.worker():
        async with app.batch(on_complete=report.s("complete"), on_success=report.s("success"),
                             on_death=report.s("death")) as batch:
            for i, n in enumerate((1, -1, -2, 3)):
                await jobs["work"].options(queue=QUEUES[i % 3]).enqueue(n)
        await wait_until(lambda: bool(calls.of("complete")), timeout=WAIT)
        await wait_until(lambda: relayed(app), timeout=WAIT)
        status = await app.batch_status(batch.bid)

    assert calls.of("death") == [batch.bid]
    assert calls.of("complete") == [batch.bid]
    assert calls.of("success") == []
    assert (status.state, status.dead, status.succeeded) == ("dead", 2, 2)


async def test_members_that_end_before_the_block_exits_end_nothing_early(
    make_app: Callable[..., App],
) -> None:
    app, calls, jobs = shop(make_app)
    async with app.worker():
        async with app.batch(on_complete=jobs["report"].s("complete")) as batch:
            first = await jobs["work"].enqueue(1)
            assert first is not None

            async def first_done() -> bool:
                return (await app.status(first)).state == "succeeded"
            await wait_until(first_done, timeout=WAIT)

            async def applied() -> bool:  # the member's end has reached the batch
                return (await app.batch_status(batch.bid)).succeeded == 1
            await wait_until(applied, timeout=WAIT)
            await wait_until(lambda: relayed(app), timeout=WAIT)
            assert calls.of("complete") == []
            assert (await app.batch_status(batch.bid)).state == "open"
            await jobs["work"].enqueue(2)
        await wait_until(lambda: bool(calls.of("complete")), timeout=WAIT)
    assert (await app.batch_status(batch.bid)).total == 2


async def test_an_exception_in_the_block_cancels_its_members_and_abandons_it(
    make_app: Callable[..., App],
) -> None:
    app, calls, jobs = shop(make_app)
    enqueued: list[str | None] = []
    batch = app.batch(on_complete=jobs["report"].s("complete"))

    async def change_of_mind() -> None:
        async with batch:
            enqueued.append(await jobs["work"].enqueue(1))
            raise RuntimeError("changed my mind")

    with pytest.raises(RuntimeError, match="changed my mind"):
        await change_of_mind()
    [jid] = enqueued
    assert jid is not None
    assert (await app.status(jid)).state == "cancelled"
    async with app.worker():
        async def dropped() -> bool:  # the cancelled copy is gone, its end applied
            store = app._store()
            return (await store.client.llen(store.keys.queue("default")) == 0
                    and (await app.batch_status(batch.bid)).cancelled == 1)
        await wait_until(dropped, timeout=WAIT)
        await wait_until(lambda: relayed(app), timeout=WAIT)
    assert calls.seen == []
    assert (await app.batch_status(batch.bid)).state == "abandoned"


async def test_a_child_batch_opened_in_a_member_ends_before_its_parent(
    make_app: Callable[..., App],
) -> None:
    app, calls, jobs = shop(make_app)
    async with app.worker():
        async with app.batch(on_complete=jobs["report"].s("outer-complete")) as outer:
            await jobs["spawn"].enqueue(3)
        await wait_until(lambda: bool(calls.of("outer-complete")), timeout=WAIT)
        status = await app.batch_status(outer.bid)

    order = [kind for kind, _ in calls.seen if kind.endswith("complete")]
    assert order == ["inner-complete", "outer-complete"]
    [child] = status.children
    assert calls.of("inner-complete") == [child]
    child_status = await app.batch_status(child)
    assert (child_status.parent, child_status.state, child_status.total) == (
        outer.bid, "success", 3)
    assert status.state == "success"


async def test_a_block_inside_another_opens_its_child(make_app: Callable[..., App]) -> None:
    app, calls, jobs = shop(make_app)
    async with app.worker():
        async with app.batch(on_complete=jobs["report"].s("outer-complete")) as outer:
            await jobs["work"].enqueue(1)
            async with app.batch(on_complete=jobs["report"].s("inner-complete")) as inner:
                await jobs["work"].enqueue(2)
                await jobs["work"].enqueue(3)
            await jobs["work"].enqueue(4)  # the outer block's again
        await wait_until(lambda: bool(calls.of("outer-complete")), timeout=WAIT)
        status = await app.batch_status(outer.bid)
        child = await app.batch_status(inner.bid)

    order = [kind for kind, _ in calls.seen if kind.endswith("complete")]
    assert order == ["inner-complete", "outer-complete"]
    assert status.children == [inner.bid]
    assert (status.total, child.total, child.parent) == (2, 2, outer.bid)


async def test_cancel_batch_cancels_what_waits_and_the_batch_ends(
    make_app: Callable[..., App],
) -> None:
    app, calls, jobs = shop(make_app)
    async with app.batch(on_complete=jobs["report"].s("complete")) as batch:
        for n in range(4):
            await jobs["work"].enqueue_in(3600, n)  # scheduled: waiting
    assert await app.cancel_batch(batch.bid) == 4
    async with app.worker():
        await wait_until(lambda: bool(calls.of("complete")), timeout=WAIT)
    status = await app.batch_status(batch.bid)
    assert (status.state, status.cancelled) == ("complete", 4)


async def test_results_and_a_bad_callback_is_refused_at_the_call(
    make_app: Callable[..., App],
) -> None:
    app, _, jobs = shop(make_app)
    with pytest.raises(TypeError):
        jobs["report"].s("too", "many")
    with pytest.raises(TypeError, match="on_complete must be a signature"):
        app.batch(on_complete=jobs["report"])
    assert (await app.batch_status("nope")).state == "unknown"


async def test_a_duplicate_jid_in_the_block_neither_ends_it_early_nor_cancels_the_first(
    make_app: Callable[..., App],
) -> None:
    app, _, jobs = shop(make_app)
    outside = await jobs["work"].options(jid="order-42").enqueue_in(3600, 1)
    assert outside == "order-42"
    enqueued: list[str | None] = []

    async def with_a_duplicate() -> None:
        async with app.batch(on_complete=jobs["report"].s("complete")) as batch:
            enqueued.append(await jobs["work"].options(jid="order-7").enqueue_in(3600, 2))
            enqueued.append(await jobs["work"].options(jid="order-7").enqueue_in(3600, 3))
            enqueued.append(await jobs["work"].options(jid="order-42").enqueue(4))
            enqueued.append(batch.bid)
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        await with_a_duplicate()
    assert enqueued[:3] == ["order-7", None, None]
    assert (await app.status("order-42")).state == "scheduled"  # not this block's to cancel
    assert (await app.status("order-7")).state == "cancelled"
    status = await app.batch_status(str(enqueued[3]))
    assert (status.state, status.total) == ("abandoned", 1)


async def test_a_child_whose_block_fails_in_a_member_does_not_hold_its_parent(
    make_app: Callable[..., App],
) -> None:
    app, calls, jobs = shop(make_app)
    async with app.worker():
        async with app.batch(on_complete=jobs["report"].s("outer-complete"),
                             on_death=jobs["report"].s("outer-death")) as outer:
            await jobs["spawn_and_fail"].enqueue()
        await wait_until(lambda: bool(calls.of("outer-complete")), timeout=WAIT)
        await wait_until(lambda: relayed(app), timeout=WAIT)
        status = await app.batch_status(outer.bid)
        [child] = status.children
        child_status = await app.batch_status(child)
    assert status.state == "dead"  # its member died
    assert calls.of("outer-death") == [outer.bid]
    assert (child_status.state, child_status.cancelled) == ("abandoned", 1)
    assert calls.of("child-complete") == []


async def test_a_callback_can_open_the_next_batch(make_app: Callable[..., App]) -> None:
    app, calls, jobs = shop(make_app)
    async with app.worker():
        async with app.batch(on_success=jobs["next_stage"].s("stage-one")) as first:
            await jobs["work"].enqueue(1)
        await wait_until(lambda: bool(calls.of("stage-two")), timeout=WAIT)
    assert calls.of("stage-one") == [first.bid]
    [second] = calls.of("stage-two")
    assert second != first.bid
    assert (await app.batch_status(second)).parent is None


async def test_a_callback_a_worker_does_not_know_stays_due_for_one_that_does(
    make_app: Callable[..., App],
) -> None:
    """A worker of another build (a rolling deploy) must not mark it fired unenqueued."""
    from cogworker_async.worker.notes_relay import NotesRelay

    app, calls, jobs = shop(make_app)
    async with app.batch(on_complete=jobs["report"].s("complete")) as batch:
        pass  # no member: due at once
    store = app._store()
    await NotesRelay(store, {}, list(QUEUES)).relay_once()  # knows no job at all
    assert await store.batches.firing() == [batch.bid]
    async with app.worker():  # one that knows it
        await wait_until(lambda: bool(calls.of("complete")), timeout=WAIT)
    assert calls.of("complete") == [batch.bid]


async def test_cancel_batch_ends_a_batch_holding_a_jid_that_was_never_pushed(
    make_app: Callable[..., App],
) -> None:
    """An enqueuer that died between a member's join and its push left a jid with no job
    behind it: cancel_batch counts it cancelled, and the batch can end."""
    app, calls, jobs = shop(make_app)
    async with app.batch(on_complete=jobs["report"].s("complete")) as batch:
        await app._store().batches.add(batch.bid, ["joined-never-pushed"])
        await jobs["work"].enqueue_in(3600, 1)
    assert await app.cancel_batch(batch.bid) == 2
    async with app.worker():
        await wait_until(lambda: bool(calls.of("complete")), timeout=WAIT)
    status = await app.batch_status(batch.bid)
    assert (status.state, status.cancelled, status.pending) == ("complete", 2, 0)


async def test_a_member_whose_payload_is_garbled_ends_its_batch_dead(
    make_app: Callable[..., App],
) -> None:
    """A member that cannot be read is filed dead under its own jid: its batch hears its
    end (it never waits forever for a member nobody can run)."""
    app, calls, jobs = shop(make_app)
    report = jobs["report"]
    async with app.batch(on_complete=report.s("complete"), on_death=report.s("death")) as batch:
        good = await jobs["work"].enqueue(1)
        garbled = await jobs["work"].enqueue(2)
    store = app._store()
    key = store.keys.queue("default")
    for raw in await store.client.lrange(key, 0, -1):
        if garbled.encode() in raw:  # its arguments are not a list any more
            await store.client.lset(key, (await store.client.lrange(key, 0, -1)).index(raw),
                                    f'{{"jid":"{garbled}","class":"work","args":"x"}}')
    async with app.worker():
        await wait_until(lambda: bool(calls.of("complete")), timeout=WAIT)
        status = await app.batch_status(batch.bid)
    assert calls.of("death") == [batch.bid]
    assert (status.state, status.succeeded, status.dead) == ("dead", 1, 1)
    assert (await app.status(garbled)).state == "dead"
    assert good is not None
