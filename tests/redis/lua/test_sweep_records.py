"""sweep_records.lua: live status records whose bound has passed are dropped, a step at a
time; every other record (live within its bound, finished) is left as it is."""

from __future__ import annotations

import pytest

from cogworker_async.jobs.status import LIVE_TTL
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import jid_of, make_job, redis_now, stored_record

QUEUE = "default"


async def test_a_record_past_its_bound_goes_and_one_within_it_stays(
    store: Store, keys: Keys
) -> None:
    vanished, waiting = make_job(), make_job()
    await store.enqueue(QUEUE, [vanished, waiting])
    # ``vanished``'s job left without a move (its queue cleared by hand long ago).
    now = await redis_now(store)
    await store.client.hset(keys.live_records(QUEUE), jid_of(vanished),
                            f"queued\tsend_email\t1.0\t{int(now) - 1}")

    cursor, dropped = await store.sweep_records(QUEUE)

    assert (cursor, dropped) == ("0", 1)
    assert await stored_record(store.client, keys, QUEUE, jid_of(vanished)) == {}
    assert (await stored_record(store.client, keys, QUEUE, jid_of(waiting)))["state"] == "queued"
    # A second pass finds nothing more: safe to run twice.
    assert await store.sweep_records(QUEUE) == ("0", 0)


async def test_a_large_live_hash_is_swept_in_bounded_steps(store: Store, keys: Keys) -> None:
    now = await redis_now(store)
    stale = {f"jid-{i}": f"queued\tsend_email\t1.0\t{int(now) - 1}" for i in range(1000)}
    await store.client.hset(keys.live_records(QUEUE), mapping=stale)

    steps, dropped, cursor = 0, 0, "0"
    while True:
        cursor, count = await store.sweep_records(QUEUE, cursor, count=100)
        steps, dropped = steps + 1, dropped + count
        if cursor == "0":
            break
        assert steps < 100, "a pass never ended"

    assert dropped == 1000
    assert steps > 1  # each step looked at about 100, not the whole hash
    assert await store.client.exists(keys.live_records(QUEUE)) == 0


async def test_a_live_record_that_cannot_be_read_goes(store: Store, keys: Keys) -> None:
    await store.client.hset(keys.live_records(QUEUE), "jid-x", "not a record")

    assert await store.sweep_records(QUEUE) == ("0", 1)


async def test_finished_records_and_fresh_live_ones_are_left_alone(
    store: Store, keys: Keys
) -> None:
    done, fresh = make_job(), make_job()
    await store.enqueue(QUEUE, [done, fresh])
    await store.fetch("host:1:abc", [QUEUE], 1)
    await store.ack("host:1:abc", QUEUE, [(done, jid_of(done))])

    assert await store.sweep_records(QUEUE) == ("0", 0)

    assert (await stored_record(store.client, keys, QUEUE, jid_of(done)))["state"] == "succeeded"
    record = await store.client.hget(keys.live_records(QUEUE), jid_of(fresh))
    bound = float(record.split(b"\t")[3])
    assert bound == pytest.approx(await redis_now(store) + LIVE_TTL, abs=5)


async def test_a_live_hash_of_the_wrong_type_is_left_alone(store: Store, keys: Keys) -> None:
    await store.client.set(keys.live_records(QUEUE), "not ours")

    assert await store.sweep_records(QUEUE) == ("0", 0)
    assert await store.client.get(keys.live_records(QUEUE)) == b"not ours"
