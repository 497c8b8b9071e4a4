"""Priorities (_queue.lua, fetch.lua): a job of priority p waits on its queue's list of
that priority; the fetch takes the head whose ``enqueued_at - p * aging`` is least (the
highest priority's without aging), first in, first out within one priority; every move
that puts a job back on its queue puts it back on its priority's list."""

from __future__ import annotations

import json
import time
from typing import Any

from cogworker_async.jobs import wire as job_module
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import items, make_job, plant_wrong_type

ME = "host:1:me"
QUEUE = "default"
START = 1_700_000_000.0


def prio_job(priority: int, at: float = START, *, queue: str = QUEUE, **extra: Any) -> bytes:
    """A raw job as the client writes it: its priority right after its jid."""
    payload = job_module.build("send_email", ["a@example.com"], {}, queue=queue, retry=True,
                               now=at, priority=priority)
    payload.update(extra)  # type: ignore[typeddict-item]
    return job_module.encode_new(payload, job_module.NO_SIZE_LIMIT)


async def order(store: Store, count: int = 100, aging: float | None = None,
                queue: str = QUEUE) -> list[bytes]:
    """What the fetch takes, one job a call (as a worker with free slots does)."""
    taken: list[bytes] = []
    for _ in range(count):
        fetched = await store.fetch(ME, [queue], 1, aging=aging)
        if not fetched.jobs:
            break
        taken += [raw for _, raw in fetched.jobs]
    return taken


async def test_a_job_waits_on_its_prioritys_list_and_its_level_is_named(
    store: Store, keys: Keys
) -> None:
    high, plain, low = prio_job(5), prio_job(0), prio_job(-3)
    await store.enqueue(QUEUE, [high, plain, low])

    assert await items(store, keys.priority_level(QUEUE, 5)) == [high]
    assert await items(store, keys.queue(QUEUE)) == [plain]
    assert await items(store, keys.priority_level(QUEUE, -3)) == [low]
    assert {int(m) for m in await store.client.smembers(keys.priority_levels(QUEUE))} == {5, -3}


async def test_without_aging_the_highest_priority_goes_first_and_fifo_within_one(
    store: Store
) -> None:
    jobs = {p: [prio_job(p, START + i) for i in range(3)] for p in (-10, -1, 0, 3, 10)}
    # interleaved, so that arrival order alone would give another answer
    for i in range(3):
        for p in (-10, 0, 10, -1, 3):
            await store.enqueue(QUEUE, [jobs[p][i]])

    taken = await order(store)

    assert taken == [*jobs[10], *jobs[3], *jobs[0], *jobs[-1], *jobs[-10]]


async def test_one_fetch_of_many_takes_them_in_the_same_order(store: Store) -> None:
    jobs = [prio_job(p, START + i) for i, p in enumerate([0, 2, -2, 2, 0])]
    await store.enqueue(QUEUE, jobs)

    fetched = await store.fetch(ME, [QUEUE], 10, aging=None)

    assert [raw for _, raw in fetched.jobs] == [jobs[1], jobs[3], jobs[0], jobs[4], jobs[2]]


async def test_with_aging_a_wait_of_aging_seconds_is_worth_one_level(store: Store) -> None:
    aging = 60.0
    old_low = prio_job(-2, START)                   # score START + 120 s
    plain = prio_job(0, START + 100)                # START + 100 s
    newer_high = prio_job(10, START + 700)          # START + 100 s: a tie goes to the higher
    newest_high = prio_job(10, START + 800)         # START + 200 s
    await store.enqueue(QUEUE, [old_low, plain, newer_high, newest_high])

    taken = await order(store, aging=aging)

    assert taken == [newer_high, plain, old_low, newest_high]


async def test_an_empty_level_leaves_the_set_and_a_push_names_it_again(
    store: Store, keys: Keys
) -> None:
    await store.enqueue(QUEUE, [prio_job(4)])
    assert len(await order(store)) == 1
    await store.fetch(ME, [QUEUE], 1, aging=None)  # finds level 4 empty

    assert await store.client.exists(keys.priority_levels(QUEUE)) == 0
    again = prio_job(4)
    await store.enqueue(QUEUE, [again])
    assert await order(store) == [again]


async def test_a_priority_written_elsewhere_in_the_payload_is_read_by_decoding(
    store: Store, keys: Keys
) -> None:
    moved = make_job(priority=7)          # json.dumps puts it last: not the anchored form
    in_an_argument = make_job(kwargs={"priority": 9})  # a keyword argument, not the job's
    await store.enqueue(QUEUE, [in_an_argument, moved])

    assert await items(store, keys.priority_level(QUEUE, 7)) == [moved]
    assert await items(store, keys.queue(QUEUE)) == [in_an_argument]


async def test_what_is_not_a_priority_leaves_the_job_on_the_plain_list(
    store: Store, keys: Keys
) -> None:
    odd = [make_job(priority=p) for p in (11, -11, 2.5, "3", True, None)]
    await store.enqueue(QUEUE, odd)

    assert sorted(await items(store, keys.queue(QUEUE))) == sorted(odd)
    assert await store.client.exists(keys.priority_levels(QUEUE)) == 0


async def test_given_back_a_job_goes_to_the_front_of_its_priority(store: Store) -> None:
    first, second = prio_job(3, START), prio_job(3, START + 1)
    await store.enqueue(QUEUE, [first, second])
    [(_, raw)] = (await store.fetch(ME, [QUEUE], 1, aging=None)).jobs
    assert raw == first

    assert await store.give_back(ME, QUEUE, first)

    assert await order(store) == [first, second]


async def test_recovered_jobs_keep_their_priority(store: Store, keys: Keys) -> None:
    owner = "dead:1:x"
    high, plain = prio_job(8, START), prio_job(0, START)
    await store.enqueue(QUEUE, [high, plain])
    assert len((await store.fetch(owner, [QUEUE], 2)).jobs) == 2
    waiting_low = prio_job(-5, START)
    await store.enqueue(QUEUE, [waiting_low])

    recovered = await store.recover(owner, QUEUE, dead_for=60.0, max_orphanings=3)

    assert recovered is not None
    assert recovered.moved == 2
    assert await items(store, keys.priority_level(QUEUE, 8)) == [high]
    assert await order(store) == [high, plain, waiting_low]


async def test_a_promoted_retry_keeps_its_priority(store: Store, keys: Keys) -> None:
    job = prio_job(6)
    await store.schedule(QUEUE, [job], at=time.time() - 5)
    due = await store.due(QUEUE, "schedule", 10)

    assert await store.promote(QUEUE, "schedule", [(member, member) for member in due]) == 1

    assert await items(store, keys.priority_level(QUEUE, 6)) == [job]


async def test_a_unique_job_and_a_periodic_tick_wait_at_their_priority(
    store: Store, keys: Keys
) -> None:
    unique = prio_job(2)
    assert await store.enqueue_unique("digest", json.loads(unique)["jid"], 60.0, QUEUE, unique)
    tick = prio_job(-4)
    claimed, _ = await store.cron_claim("nightly", 1000.0, QUEUE, tick)

    assert claimed
    assert await items(store, keys.priority_level(QUEUE, 2)) == [unique]
    assert await items(store, keys.priority_level(QUEUE, -4)) == [tick]


async def test_a_paused_queue_gives_nothing_of_any_priority(store: Store) -> None:
    await store.enqueue(QUEUE, [prio_job(9), prio_job(0)])
    await store.pause(QUEUE)

    assert await order(store) == []


async def test_a_queue_limit_counts_the_jobs_of_every_priority(store: Store) -> None:
    await store.enqueue(QUEUE, [prio_job(p) for p in (9, 0, -9, 9)])

    fetched = await store.fetch(ME, [QUEUE], 10, {QUEUE: 2}, aging=None)

    assert len(fetched.jobs) == 2


async def test_a_level_set_of_the_wrong_type_leaves_the_plain_list_served(
    store: Store, keys: Keys
) -> None:
    plain = prio_job(0)
    await store.enqueue(QUEUE, [plain])
    await plant_wrong_type(store, keys.priority_levels(QUEUE))

    assert await order(store) == [plain]


async def test_a_level_set_of_the_wrong_type_leaves_no_level_s_job_waiting_forever(
    store: Store, keys: Keys
) -> None:
    # A co-tenant's key where the set of levels was: it cannot say which levels hold
    # jobs, so the fetch looks at every level (the burst of the full co-tenant fuzz
    # never ended: the job on level 5 was never taken).
    high, plain, low = prio_job(5), prio_job(0), prio_job(-3)
    await store.enqueue(QUEUE, [high, plain, low])
    await store.client.delete(keys.priority_levels(QUEUE))
    await plant_wrong_type(store, keys.priority_levels(QUEUE))

    assert await order(store) == [high, plain, low]


async def test_a_level_set_holding_what_no_push_writes_leaves_no_level_s_job_waiting(
    store: Store, keys: Keys
) -> None:
    high, low = prio_job(5), prio_job(-3)
    await store.enqueue(QUEUE, [high, low])
    await store.client.delete(keys.priority_levels(QUEUE))
    await store.client.sadd(keys.priority_levels(QUEUE), "garbage", "1e300", "2.5")

    assert await order(store) == [high, low]
    assert await store.client.smembers(keys.priority_levels(QUEUE)) == {  # not ours to drop
        b"garbage", b"1e300", b"2.5"}


async def test_a_level_its_set_lost_is_named_again_and_its_jobs_fetched(
    store: Store, keys: Keys
) -> None:
    # The set evicted (allkeys-* policies) or deleted by a hand: the fetch reads only the
    # levels it names, so the poller names again each level whose list holds jobs.
    high, plain, low = prio_job(5), prio_job(0), prio_job(-3)
    await store.enqueue(QUEUE, [high, plain, low])
    await store.client.delete(keys.priority_levels(QUEUE))
    assert await order(store, count=1) == [plain]  # the lost levels are not looked at

    assert sorted(await store.name_levels(QUEUE)) == [-3, 5]
    assert await store.name_levels(QUEUE) == []  # named: nothing more to do
    assert await order(store) == [high, low]


async def test_naming_levels_leaves_a_set_of_another_type_to_the_fetch(
    store: Store, keys: Keys
) -> None:
    high = prio_job(5)
    await store.enqueue(QUEUE, [high])
    await store.client.delete(keys.priority_levels(QUEUE))
    await plant_wrong_type(store, keys.priority_levels(QUEUE))

    assert await store.name_levels(QUEUE) == []  # not ours to overwrite
    assert await order(store) == [high]  # the fetch looks at every level


async def test_an_unreadable_head_of_a_level_is_taken_first_to_be_filed(
    store: Store, keys: Keys
) -> None:
    garbled = b'{"jid":"bad","priority":3,"class":'
    await store.client.lpush(keys.priority_level(QUEUE, 3), garbled)
    await store.client.sadd(keys.priority_levels(QUEUE), 3)
    plain = prio_job(0)
    await store.enqueue(QUEUE, [plain])

    assert await order(store, aging=60.0) == [garbled, plain]
