"""Fair groups (_queue.lua, fetch.lua): a job of a group waits on its group's list, and
its group is in the queue's ring while it has jobs waiting; the fetch serves the ring in
turn (the jobs without a group taking one turn together), passes over a group at its
limit (counted from the in-progress lists), and every move that puts a job back on its
queue puts it back in its group."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from cogworker_async.jobs import wire as job_module
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import items, make_job, plant_wrong_type, scored, still_planted

ME = "host:1:me"
OTHER = "host:2:other"
QUEUE = "default"


def grouped(group: str | None, label: str = "", *, priority: int = 0, **extra: Any) -> bytes:
    """A raw job as the client writes it: its priority and group right after its jid."""
    payload = job_module.build("send", [label], {}, queue=QUEUE, retry=True,
                               now=1_700_000_000.0, priority=priority, group=group)
    payload.update(extra)  # type: ignore[typeddict-item]
    return job_module.encode_new(payload, job_module.NO_SIZE_LIMIT)


def label(raw: bytes) -> str:
    return str(json.loads(raw)["args"][0])


async def order(store: Store, *, limit: int = 0, count: int = 100,
                identity: str = ME) -> list[str]:
    """What the fetch takes, one job a call."""
    taken: list[str] = []
    for _ in range(count):
        fetched = await store.fetch(identity, [QUEUE], 1, aging=None,
                                    group_limits={QUEUE: limit} if limit else None)
        if not fetched.jobs:
            break
        taken += [label(raw) for _, raw in fetched.jobs]
    return taken


async def ring(store: Store, keys: Keys) -> list[str]:
    return [m.decode() for m in await store.client.zrange(keys.groups(QUEUE), 0, -1)]


async def test_a_grouped_job_waits_on_its_groups_list_and_the_group_joins_the_ring(
    store: Store, keys: Keys
) -> None:
    first, plain, second = grouped("acme", "a1"), grouped(None, "p"), grouped("zeta", "z1")
    await store.enqueue(QUEUE, [first, plain, second, grouped("acme", "a2")])

    assert [label(r) for r in await items(store, keys.group(QUEUE, "acme"))] == ["a2", "a1"]
    assert await items(store, keys.queue(QUEUE)) == [plain]
    assert await ring(store, keys) == ["acme", "zeta"]


async def test_groups_are_served_in_turn_and_a_backlog_delays_no_other_group(
    store: Store
) -> None:
    await store.enqueue(QUEUE, [grouped("big", f"b{i}") for i in range(5)])
    await store.enqueue(QUEUE, [grouped("one", "o1")])
    await store.enqueue(QUEUE, [grouped("two", "t1"), grouped("two", "t2")])

    assert await order(store) == ["b0", "o1", "t1", "b1", "t2", "b2", "b3", "b4"]


async def test_jobs_without_a_group_take_one_turn_together(store: Store) -> None:
    await store.enqueue(QUEUE, [grouped("acme", f"a{i}") for i in range(3)])
    await store.enqueue(QUEUE, [grouped(None, "p0"), grouped(None, "hi", priority=5),
                                grouped(None, "p1")])

    # the plain jobs join the ring behind acme, and among them priority still rules
    assert await order(store) == ["a0", "hi", "a1", "p0", "a2", "p1"]


async def test_a_group_at_its_limit_is_passed_over_and_keeps_its_turn(
    store: Store, keys: Keys
) -> None:
    await store.enqueue(QUEUE, [grouped("acme", f"a{i}") for i in range(3)])
    await store.enqueue(QUEUE, [grouped("zeta", f"z{i}") for i in range(3)])

    # nothing is acknowledged: each group's first job stays running
    assert await order(store, limit=1) == ["a0", "z0"]
    assert await ring(store, keys) == ["acme", "zeta"]
    # one of acme's ends: acme may go again, zeta may not
    [acme_running] = [raw for raw in await items(store, keys.in_progress(QUEUE, ME))
                      if label(raw) == "a0"]
    assert await store.ack(ME, QUEUE, [(acme_running, json.loads(acme_running)["jid"])]) == 1
    assert await order(store, limit=1) == ["a1"]


async def test_a_limit_counts_the_jobs_other_processes_run(store: Store) -> None:
    await store.enqueue(QUEUE, [grouped("acme", "a0"), grouped("acme", "a1")])
    assert await order(store, identity=OTHER, count=1) == ["a0"]
    await store.client.sadd(store.keys.queue_identities(QUEUE), OTHER)  # as its beat does

    assert await order(store, limit=1) == []
    assert await order(store, limit=2) == ["a1"]


async def test_a_limit_that_cannot_be_counted_holds_every_group(
    store: Store, keys: Keys
) -> None:
    await store.enqueue(QUEUE, [grouped("acme", "a0"), grouped(None, "plain")])
    await store.client.sadd(keys.queue_identities(QUEUE), OTHER)
    await plant_wrong_type(store, keys.in_progress(QUEUE, OTHER))

    assert await order(store, limit=5) == ["plain"]


async def test_given_back_and_recovered_jobs_go_back_to_the_front_of_their_group(
    store: Store, keys: Keys
) -> None:
    await store.enqueue(QUEUE, [grouped("acme", f"a{i}") for i in range(3)])
    fetched = await store.fetch(ME, [QUEUE], 2, aging=None)
    [first, second] = [raw for _, raw in fetched.jobs]
    assert await store.give_back(ME, QUEUE, second)
    assert await ring(store, keys) == ["acme"]

    recovered = await store.recover(ME, QUEUE, dead_for=60.0, max_orphanings=3)

    assert recovered is not None
    assert recovered.moved == 1
    assert await order(store) == ["a0", "a1", "a2"]
    assert label(first) == "a0"


async def test_an_emptied_group_leaves_the_ring_and_comes_back_with_its_next_job(
    store: Store, keys: Keys
) -> None:
    await store.enqueue(QUEUE, [grouped("acme", "a0"), grouped("zeta", "z0")])
    await store.client.delete(keys.group(QUEUE, "acme"))  # deleted by hand meanwhile

    assert await order(store) == ["z0"]
    assert await store.client.exists(keys.groups(QUEUE)) == 0
    await store.enqueue(QUEUE, [grouped("acme", "a1")])
    assert await ring(store, keys) == ["acme"]


async def test_a_group_named_elsewhere_in_the_payload_is_read_by_decoding(
    store: Store, keys: Keys
) -> None:
    moved = make_job(group="acme")  # json.dumps puts it last: not the anchored form
    in_an_argument = make_job(kwargs={"group": "zeta"})
    odd = [make_job(group=value) for value in ("", 7, None)]
    await store.enqueue(QUEUE, [moved, in_an_argument, *odd])

    assert await items(store, keys.group(QUEUE, "acme")) == [moved]
    assert sorted(await items(store, keys.queue(QUEUE))) == sorted([in_an_argument, *odd])
    assert await ring(store, keys) == ["acme"]


async def test_a_ring_of_the_wrong_type_leaves_the_plain_list_served(
    store: Store, keys: Keys
) -> None:
    await store.enqueue(QUEUE, [grouped(None, "plain")])
    await plant_wrong_type(store, keys.groups(QUEUE))

    assert await order(store) == ["plain"]


async def test_a_promoted_scheduled_job_waits_in_its_group(store: Store, keys: Keys) -> None:
    raw = grouped("acme", "later")
    await store.schedule(QUEUE, [raw], delay=0.0)
    due = await store.due(QUEUE, "schedule", 10)

    assert await store.promote(QUEUE, "schedule", [(member, member) for member in due]) == 1
    assert await items(store, keys.group(QUEUE, "acme")) == [raw]
    assert await ring(store, keys) == ["acme"]


async def test_a_ring_of_the_wrong_type_refuses_the_push_before_anything_is_written(
    store: Store, keys: Keys
) -> None:
    """The ring is written before the group's list: a push it refuses leaves the job
    where it was (a promotion keeps it scheduled), never on a list no fetch reads."""
    await plant_wrong_type(store, keys.groups(QUEUE))
    job = grouped("acme", "later")
    await store.schedule(QUEUE, [job], delay=0.0)
    due = await store.due(QUEUE, "schedule", 10)

    for _ in range(3):  # the poller tries again at each poll
        assert await store.promote(QUEUE, "schedule", [(m, m) for m in due]) == 0
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        await store.enqueue(QUEUE, [grouped("acme", "now")])

    assert await store.client.exists(keys.group(QUEUE, "acme")) == 0
    assert [m for m, _ in await scored(store, keys.schedule(QUEUE))] == [job]
    assert await still_planted(store, keys.groups(QUEUE))


async def test_a_once_push_refused_for_a_key_of_another_type_leaves_no_marker(
    store: Store, keys: Keys
) -> None:
    """The outbox's and the batch callbacks' push: a marker left by a push that failed
    would refuse the retry as "pushed already", and the job would be lost."""
    job = grouped("acme", "once")
    await plant_wrong_type(store, keys.group(QUEUE, "acme"))
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        await store.enqueue(QUEUE, [job], chosen="once")
    await store.client.delete(keys.group(QUEUE, "acme"))  # mended by hand

    assert await store.enqueue(QUEUE, [job], chosen="once") != -1  # pushed
    assert await items(store, keys.group(QUEUE, "acme")) == [job]
    assert await store.enqueue(QUEUE, [job], chosen="once") == -1  # now it was pushed


async def test_a_unique_lock_is_not_taken_for_a_push_that_cannot_land(
    store: Store, keys: Keys
) -> None:
    job = grouped("acme", "unique")
    await plant_wrong_type(store, keys.groups(QUEUE))
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        await store.enqueue_unique("digest", json.loads(job)["jid"], 60.0, QUEUE, job)

    assert await store.client.exists(keys.unique(QUEUE, "digest")) == 0
