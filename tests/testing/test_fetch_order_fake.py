"""The fake's order (``testing/world.py``) against the same models the fetch script is
held to on a real Redis (``tests/jobs/test_fetch_order_model.py``, Hypothesis): any
interleaving of enqueues and fetches takes the jobs in the model's order. The fake has
aging off (a drain that aging would reorder raises ``NotFaked``), so the priority model
runs with aging off here; a fetch of N is N takes, as a drain makes them."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from cogworker_async.jobs import wire
from cogworker_async.testing.world import World
from tests.jobs.test_fetch_order_model import (
    QUEUE,
    START,
    RingModel,
    Waiting,
    grouped_steps,
    steps,
)


def _raw(seq: int, now: float, priority: int, group: str | None = None) -> tuple[bytes, str]:
    payload = wire.build("model.job", [seq], {}, queue=QUEUE, retry=True, now=now,
                         priority=priority, group=group)
    return wire.encode_new(payload, wire.NO_SIZE_LIMIT), payload["jid"]


def _fetch(world: World, count: int) -> list[bytes]:
    taken = []
    for _ in range(count):
        entry = world.take(scheduled=False, retries=True)
        if entry is None:
            break
        taken.append(entry.raw)
    return taken


@given(steps=steps)
@example(steps=[("enqueue", -10, 0.0, 1), ("enqueue", 10, 25.0, 1), ("fetch", 2)])
def test_the_fake_takes_jobs_in_the_priority_models_order(steps: list[tuple]) -> None:
    world, model = World(), []
    now, seq = START, 0
    for step in [*steps, ("fetch", 10_000)]:
        if step[0] == "enqueue":
            _, priority, later, count = step
            now += later
            for _ in range(count):
                raw, jid = _raw(seq, now, priority)
                world.add(raw, QUEUE, jid, due=None, state="queued")
                model.append(Waiting(raw, priority, now, seq))
                seq += 1
        else:
            expected = sorted(model, key=lambda w: w.key(None))[:step[1]]
            assert _fetch(world, step[1]) == [w.raw for w in expected]
            for taken in expected:
                model.remove(taken)
    assert model == []


@given(steps=grouped_steps)
@example(steps=[("enqueue", "a", 0, 3), ("enqueue", None, 2, 2), ("enqueue", "b", 0, 1),
                ("fetch", 5)])
@example(steps=[("enqueue", None, 0, 1), ("enqueue", "a", 0, 1), ("fetch", 2)])
def test_the_fake_serves_groups_in_turn_as_the_model_does(steps: list[tuple]) -> None:
    world, model = World(), RingModel({}, [], [])
    seq = 0
    for step in [*steps, ("fetch", 10_000)]:
        if step[0] == "enqueue":
            _, group, priority, count = step
            for _ in range(count):
                raw, jid = _raw(seq, START + seq, priority, group)
                world.add(raw, QUEUE, jid, due=None, state="queued")
                model.push(raw, group, Waiting(raw, priority, START + seq, seq))
                seq += 1
        else:
            assert _fetch(world, step[1]) == model.fetch(step[1])
    assert world.waiting == []


def test_the_strategies_are_the_models() -> None:
    """Both files draw from one set of strategies: a change there reaches the fake."""
    assert isinstance(steps, st.SearchStrategy)
    assert isinstance(grouped_steps, st.SearchStrategy)
