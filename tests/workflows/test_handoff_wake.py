"""A hand-off does not wait for the relay's poll (issue 43 item 3): the script that notes
a parent's or a batch member's end publishes on the notes list's name, the workers
serving that queue relay it at once, and the dependent, the chain's next step or the
batch's callback is pushed with a wake-up of its own.

The workers here poll every 60 s (a pass every 30–90 s after the first, which comes
within 0.5 s of the start): each test's workflow has two hand-offs or more, one after
the other, and must end inside ``WAIT``, far less than a single poll — the first pass
can hand off one of them at most, so a wake-up handed off the rest. On a single Redis
and on a 3-master cluster, where the note's writer and the subscriber are on different
nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import After, App
from cogworker_async.redis.queues import NOTES_WAKE
from cogworker_async.worker.notes_relay import NotesRelay
from tests.conftest import url_of_topology
from tests.waiting import wait_until

POLL = 60.0
WAIT = 15.0
"""Far inside one poll (30 s at least): a workflow that ends in it was woken."""
QUEUES = ["default", "emails", "reports"]

redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)


Jobs = tuple[App, list[tuple[str, int]], Any, Any]


def slow_polling(make_app: Callable[..., App]) -> Jobs:
    app = make_app(track_jobs=True, queues=QUEUES, poll_interval=POLL)
    seen: list[tuple[str, int]] = []

    @app.job(name="step", retry=0, keep_result=600)
    async def step(n: int) -> int:
        seen.append(("step", n))
        return n + 1

    @app.job(name="done", retry=0)
    async def done(kind: str) -> None:
        seen.append((kind, 0))

    return app, seen, step, done


async def test_a_ten_step_chain_hands_off_without_waiting_for_the_poll(
    make_app: Callable[..., App],
) -> None:
    app, seen, step, _ = slow_polling(make_app)
    async with app.worker():
        await app.chain(*(step.options(queue=QUEUES[n % 3]).s(n) for n in range(10))).enqueue()
        await wait_until(lambda: len(seen) == 10, timeout=WAIT)
    assert seen == [("step", n) for n in range(10)]  # in order, each once


async def test_a_dependent_on_another_queue_takes_its_parent_result_at_once(
    make_app: Callable[..., App],
) -> None:
    app, seen, step, _ = slow_polling(make_app)
    async with app.worker():
        parent = await step.options(queue="emails").enqueue(41)
        assert parent is not None
        child = await step.options(queue="reports",
                                   after=After([parent], pass_result=True)).enqueue()
        assert child is not None
        grandchild = await step.options(queue="default",
                                        after=After([child], pass_result=True)).enqueue()
        assert grandchild is not None
        assert await app.result(grandchild, timeout=WAIT) == 44  # 41, + 1 at each step
    assert seen == [("step", 41), ("step", 42), ("step", 43)]


async def test_a_batch_s_last_end_enqueues_its_callbacks_at_once(
    make_app: Callable[..., App],
) -> None:
    app, seen, step, done = slow_polling(make_app)
    async with app.worker():
        for wave in ("first", "second"):  # the second opened once the first ended
            async with app.batch(wave, on_complete=done.s(f"{wave} complete"),
                                 on_success=done.s(f"{wave} success")):
                for n in range(5):
                    await step.options(queue=QUEUES[n % 3]).enqueue(n)
            ended = {(f"{wave} complete", 0), (f"{wave} success", 0)}
            await wait_until(lambda ended=ended: ended <= set(seen), timeout=WAIT)
    assert sorted(seen) == sorted([("step", n) for n in range(5)] * 2 + [
        (f"{wave} {kind}", 0) for wave in ("first", "second") for kind in ("complete", "success")])


async def test_an_end_that_notes_wakes_its_queue_s_relays_on_the_wake_channel(
    make_app: Callable[..., App],
) -> None:
    # The script derives the channel and the queue from the notes list's name
    # (_record.lua): this holds them to the names the worker listens for.
    app, _, step, _ = slow_polling(make_app)
    gate = anyio.Event()

    @app.job(name="gated", retry=0)
    async def gated() -> None:
        await gate.wait()  # ends after its dependent watches it: its end is noted

    store = app._store()
    pubsub = store.client.pubsub()
    await pubsub.subscribe(store.keys.wake_channel)
    try:
        async with app.worker():
            parent = await gated.options(queue="emails").enqueue()
            assert parent is not None
            await step.options(queue="reports", after=[parent]).enqueue(2)
            gate.set()
            heard: list[str] = []

            async def notes_heard() -> bool:
                message = await pubsub.get_message(ignore_subscribe_messages=True,
                                                   timeout=0.1)
                if message is not None:
                    heard.append(message["data"].decode())
                return f"{NOTES_WAKE}emails" in heard

            await wait_until(notes_heard, timeout=WAIT)  # (heard: in the failure's locals)
    finally:
        await pubsub.aclose()


async def test_a_wake_up_for_a_queue_without_notes_relays_nothing_and_ends(
    make_app: Callable[..., App],
) -> None:
    app, *_ = slow_polling(make_app)
    relay = NotesRelay(app._store(), app.registry, QUEUES, interval=POLL)
    assert await relay.relay_woken(["default", "emails"]) == 0
