"""Batches that must end whatever happened (issue 40): a block held open by a process
that died inside it, a batch a co-tenant damaged, members on a queue no worker serves.

Each test is what a user sees: the callbacks of the healthy batches run, the parent
ends, ``batch_status`` answers."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Final

import pytest

from cogworker_async import App, context, current_job
from cogworker_async.admin import Inspector
from cogworker_async.redis.errors import ResponseError
from cogworker_async.worker.batch_relay import UNSERVED_EVERY, BatchRelay
from tests.waiting import wait_until

WAIT: Final = 15.0
DEEP: Final = "[" * 100_000 + "]" * 100_000
"""JSON too deep for Python's parser (RecursionError, not ValueError)."""


def shop(make_app: Callable[..., App]) -> tuple[App, list[tuple[str, Any]], dict[str, Any]]:
    app = make_app(track_jobs=True)
    seen: list[tuple[str, Any]] = []

    @app.job(name="work", retry=0)
    async def work(n: int) -> int:
        seen.append(("work", n))
        return n

    @app.job(name="report", retry=0)
    async def report(kind: str) -> None:
        seen.append((kind, current_job().batch_id))

    return app, seen, {"work": work, "report": report}


def of(seen: list[tuple[str, Any]], kind: str) -> list[Any]:
    return [value for name, value in seen if name == kind]


# -- defect 2: one damaged batch stops nobody's callbacks --------------------------------


async def test_a_damaged_batch_holds_up_no_other_batch_and_reads_as_damaged(
    make_app: Callable[..., App],
) -> None:
    app, seen, jobs = shop(make_app)
    store = app.store()
    report = jobs["report"]
    bids = {}
    for name in ("deep", "wrong-type", "field", "good"):
        async with app.batch(name, on_complete=report.s(name)) as batch:
            pass  # no member: due as the block exits
        bids[name] = batch.bid
    # Garbage a co-tenant (or a hand) left, each due before the healthy batch.
    await store.client.hset(store.keys.batch(bids["deep"]), "callbacks", DEEP)
    await store.client.delete(store.keys.batch(bids["wrong-type"]))
    await store.client.rpush(store.keys.batch(bids["wrong-type"]), "not a hash")
    await store.client.hset(store.keys.batch(bids["field"]), mapping={
        "total": "lots", "callbacks": '{"complete": 7}'})
    await store.client.zadd(store.keys.batches_firing,
                            {bids[name]: i for i, name in enumerate(("deep", "wrong-type",
                                                                     "field"))})

    async with app.worker():
        await wait_until(lambda: bool(of(seen, "good")), timeout=WAIT)
    assert of(seen, "good") == [bids["good"]]
    assert of(seen, "deep") == of(seen, "field") == of(seen, "wrong-type") == []

    for name in ("deep", "wrong-type", "field"):
        status = await app.batch_status(bids[name])
        assert status.state == "damaged", (name, status)
        assert bids[name] in (status.problem or "")
    # The damaged one whose key is not a hash is put off, not retried every pass.
    assert await store.batches.firing() == []
    assert await Inspector(app).batches.status(bids["deep"]) is None  # "unreadable"
    page = await Inspector(app).batches.page("all")
    assert {row.bid: row.status for row in page.items}[bids["deep"]] is None


# -- defect 1: a block whose process died, and cancel_batch on any batch ----------------


async def test_cancel_batch_ends_a_batch_a_block_still_holds_open(
    make_app: Callable[..., App],
) -> None:
    app, seen, jobs = shop(make_app)
    block = app.batch(on_complete=jobs["report"].s("complete"))
    await block.__aenter__()  # a block that never exits (its process hangs, or died)
    try:
        await jobs["work"].enqueue_in(3600, 1)
    finally:
        if block._token is not None:
            context.BATCH.reset(block._token)
            block._token = None
    assert (await app.batch_status(block.bid)).state == "open"

    assert await app.cancel_batch(block.bid) == 1
    async with app.worker():
        await wait_until(lambda: bool(of(seen, "complete")), timeout=WAIT)
    status = await app.batch_status(block.bid)
    assert (status.state, status.cancelled) == ("complete", 1)
    assert of(seen, "complete") == [block.bid]


async def test_a_block_of_a_process_that_is_gone_is_let_go_and_its_parent_ends(
    make_app: Callable[..., App],
) -> None:
    """A member's child batch opened by a worker process that died inside the block (its
    token names that process; recovery forgot it): the relay abandons the child, cancels
    what it left pending, and the parent ends with the child the recovered run made."""
    app, seen, jobs = shop(make_app)
    store = app.store()
    async with app.batch(on_complete=jobs["report"].s("parent")) as parent:
        await jobs["work"].enqueue_in(3600, 1)  # the member (its run the "recovered" one)
    await store.batches.open("dead-child", parent=parent.bid, token="n1.n@gone:1:abc",
                             callbacks='{"complete": {"name": "report", "args": ["child"]}}')
    await store.batches.add("dead-child", ["left-pending"])  # joined, never pushed
    [member] = await store.batches.members(parent.bid, "pending")
    await app.cancel(member)

    async with app.worker():
        await wait_until(lambda: bool(of(seen, "parent")), timeout=WAIT)
    child = await app.batch_status("dead-child")
    assert (child.state, child.cancelled, child.pending) == ("abandoned", 1, 0)
    assert of(seen, "child") == []
    assert of(seen, "parent") == [parent.bid]
    assert await store.client.zcard(store.keys.batches_held) == 0


# -- defect 5: notes of a queue no worker serves ---------------------------------------


async def test_cancel_batch_on_a_queue_no_worker_serves_ends_the_batch(
    make_app: Callable[..., App],
) -> None:
    app, seen, jobs = shop(make_app)
    async with app.batch(on_complete=jobs["report"].s("complete")) as batch:
        for n in range(3):
            await jobs["work"].options(queue="nobody-serves").enqueue_in(3600, n)
    assert await app.cancel_batch(batch.bid) == 3

    async with app.worker():  # serves "default" only
        await wait_until(lambda: bool(of(seen, "complete")), timeout=UNSERVED_EVERY * 3)
    status = await app.batch_status(batch.bid)
    assert (status.state, status.cancelled) == ("complete", 3)


async def test_one_worker_at_a_time_relays_the_unserved_queues(
    make_app: Callable[..., App],
) -> None:
    app, _, jobs = shop(make_app)
    store = app.store()
    async with app.batch() as batch:
        await jobs["work"].options(queue="nobody-serves").enqueue_in(3600, 1)
    await app.cancel_batch(batch.bid)
    first, second = (BatchRelay(store, app.registry, ["default"], identity=name)
                     for name in ("first", "second"))
    await first.relay_unserved(force=True)
    assert await store.client.llen(store.keys.batch_notes("nobody-serves")) == 0
    assert (await app.batch_status(batch.bid)).state == "complete"
    assert await store.client.get(store.keys.notes_lock) == b"first"
    await second.relay_unserved(force=True)  # the lock is first's: nothing read, no error


@pytest.mark.parametrize("garbage", ["hash", "notes"])
async def test_garbage_in_an_unserved_queue_stops_no_other(
    make_app: Callable[..., App], garbage: str,
) -> None:
    app, _, jobs = shop(make_app)
    store = app.store()
    async with app.batch() as batch:
        await jobs["work"].options(queue="z-unserved").enqueue_in(3600, 1)
    await app.cancel_batch(batch.bid)
    await jobs["work"].options(queue="a-unserved").enqueue_in(3600, 1)  # registers it
    if garbage == "notes":
        await store.client.set(store.keys.batch_notes("a-unserved"), "not a list")
    else:
        await store.client.rpush(store.keys.batch_notes("a-unserved"), b"\xff\tjunk\tdead")
    relay = BatchRelay(store, app.registry, ["default"], identity="me")
    with pytest.raises(ResponseError) if garbage == "notes" else contextlib.nullcontext():
        await relay.relay_unserved(force=True)  # said at the end, for the streak
    assert (await app.batch_status(batch.bid)).state == "complete"
