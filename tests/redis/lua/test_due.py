"""due.lua: the members of a queue's zset whose time has come, by Redis' clock."""

from __future__ import annotations

import pytest
import redis

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import (
    NOT_UTF8,
    make_job,
    redis_now,
    run_raw,
    scored,
)

QUEUE = "default"


async def test_returns_due_members_earliest_first(store: Store, keys: Keys) -> None:
    now = await redis_now(store)
    later, earlier, future = make_job(), make_job(), make_job()
    await store.schedule(QUEUE, [later], at=now - 10)
    await store.schedule(QUEUE, [earlier], at=now - 100)
    await store.schedule(QUEUE, [future], at=now + 3_600)

    assert await store.due(QUEUE, "schedule", 10) == [earlier, later]


async def test_returns_at_most_limit_members(store: Store, keys: Keys) -> None:
    now = await redis_now(store)
    jobs = [make_job() for _ in range(5)]
    for offset, job in enumerate(jobs):
        await store.schedule(QUEUE, [job], at=now - 100 + offset)

    assert await store.due(QUEUE, "schedule", 2) == jobs[:2]


async def test_only_the_queues_own_set_is_read(store: Store, keys: Keys) -> None:
    now = await redis_now(store)
    emails, reports = make_job("emails"), make_job("reports")
    await store.schedule("emails", [emails], at=now - 10)
    await store.schedule("reports", [reports], at=now - 20)

    assert await store.due("emails", "schedule", 10) == [emails]
    assert await store.due("reports", "schedule", 10) == [reports]


async def test_reads_only(store: Store, keys: Keys) -> None:
    now = await redis_now(store)
    await store.file_entry(QUEUE, "retry", make_job(), -5.0)
    await store.schedule(QUEUE, [make_job()], at=now - 5)
    before = await scored(store, keys.retry(QUEUE)), await scored(store, keys.schedule(QUEUE))

    assert len(await store.due(QUEUE, "retry", 10)) == 1

    assert (await scored(store, keys.retry(QUEUE)),
            await scored(store, keys.schedule(QUEUE))) == before


async def test_an_empty_set_has_nothing_due(store: Store) -> None:
    assert await store.due(QUEUE, "retry", 10) == []


async def test_members_that_are_not_json_are_returned_as_they_stand(
    store: Store, keys: Keys
) -> None:
    # The poller decides what to do with them (dead, byte for byte): due only reads.
    now = await redis_now(store)
    await store.client.zadd(keys.schedule(QUEUE), {NOT_UTF8: now - 2, b"not json {": now - 1})

    assert await store.due(QUEUE, "schedule", 10) == [NOT_UTF8, b"not json {"]


@pytest.mark.parametrize("caller_skew", [-86_400, 86_400])
async def test_the_callers_clock_is_only_a_fallback(
    store: Store, keys: Keys, caller_skew: int
) -> None:
    now = await redis_now(store)
    due, future = make_job(), make_job()
    await store.schedule(QUEUE, [due], at=now - 60)
    await store.schedule(QUEUE, [future], at=now + 3_600)

    members = await run_raw(store, "due", [keys.schedule(QUEUE)], [repr(now + caller_skew), 10])

    assert members == [due]


async def test_a_zset_of_the_wrong_type_is_an_error(store: Store, keys: Keys) -> None:
    await store.client.rpush(keys.retry(QUEUE), make_job())

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.due(QUEUE, "retry", 10)

    assert await store.client.llen(keys.retry(QUEUE)) == 1
