"""move_member.lua: one entry from a zset of a queue to another, written before removed."""

from __future__ import annotations

import json

import pytest
import redis

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import (
    NOT_UTF8,
    make_job,
    plant_wrong_type,
    redis_now,
    run_raw,
    scored,
    still_planted,
)

QUEUE = "default"


def dead_entry(member: bytes) -> bytes:
    return json.dumps({"jid": "d1", "class": None, "error_class": "UnparseablePayload",
                       "raw_payload_preview": member.decode("utf-8", "replace")}).encode()


async def test_moves_the_entry_with_a_score_from_redis_time(store: Store, keys: Keys) -> None:
    member = make_job(retry_count=3)
    await store.file_entry(QUEUE, "retry", member, 60.0)
    entry = json.dumps({**json.loads(member), "error_message": "killed"}).encode()

    before = await redis_now(store)
    assert await store.move_member(QUEUE, "retry", "dead", member, entry) is True
    after = await redis_now(store)

    [(moved, score)] = await scored(store, keys.dead(QUEUE))
    assert moved == entry
    assert before <= score <= after
    assert await store.client.exists(keys.retry(QUEUE)) == 0


async def test_a_delay_is_added_to_redis_time(store: Store, keys: Keys) -> None:
    member = make_job()
    await store.file_entry(QUEUE, "dead", member, 0.0)

    before = await redis_now(store)
    await store.move_member(QUEUE, "dead", "retry", member, member, delay=120.0)
    after = await redis_now(store)

    [(_, score)] = await scored(store, keys.retry(QUEUE))
    assert before + 120.0 <= score <= after + 120.0


async def test_an_entry_that_is_not_json_goes_to_dead(store: Store, keys: Keys) -> None:
    # The poller's case: a scheduled entry that is not a job.
    await store.client.zadd(keys.schedule(QUEUE), {b"not json {": 1.0, NOT_UTF8: 2.0})

    for member in (b"not json {", NOT_UTF8):
        moved = await store.move_member(QUEUE, "schedule", "dead", member, dead_entry(member))
        assert moved is True

    assert await store.client.exists(keys.schedule(QUEUE)) == 0
    assert sorted(m for m, _ in await scored(store, keys.dead(QUEUE))) == sorted(
        [dead_entry(b"not json {"), dead_entry(NOT_UTF8)]
    )


async def test_a_second_call_after_a_lost_reply_changes_nothing(store: Store, keys: Keys) -> None:
    member = make_job()
    await store.file_entry(QUEUE, "retry", member, 60.0)
    await store.move_member(QUEUE, "retry", "dead", member, member)
    filed = await scored(store, keys.dead(QUEUE))

    assert await store.move_member(QUEUE, "retry", "dead", member, member) is False

    assert await scored(store, keys.dead(QUEUE)) == filed
    assert await store.client.exists(keys.retry(QUEUE)) == 0


async def test_a_member_that_is_gone_writes_nothing(store: Store, keys: Keys) -> None:
    assert await store.move_member(QUEUE, "retry", "dead", make_job(), make_job()) is False

    assert await store.client.exists(keys.dead(QUEUE)) == 0


async def test_a_destination_of_the_wrong_type_leaves_the_member_in_place(
    store: Store, keys: Keys
) -> None:
    member = make_job()
    await store.file_entry(QUEUE, "retry", member, 60.0)
    await plant_wrong_type(store, keys.dead(QUEUE))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.move_member(QUEUE, "retry", "dead", member, member)

    assert [m for m, _ in await scored(store, keys.retry(QUEUE))] == [member]
    assert await still_planted(store, keys.dead(QUEUE))


async def test_moving_a_member_onto_itself_only_changes_its_score(
    store: Store, keys: Keys
) -> None:
    # E.g. "retry now" on the retry tab: same set, same entry, a new score.
    member = make_job()
    await store.file_entry(QUEUE, "retry", member, 3_600.0)

    assert await store.move_member(QUEUE, "retry", "retry", member, member, delay=0.0) is True

    [(kept, score)] = await scored(store, keys.retry(QUEUE))
    assert kept == member
    assert score <= await redis_now(store)


async def test_the_callers_clock_is_only_a_fallback(store: Store, keys: Keys) -> None:
    member = make_job()
    await store.file_entry(QUEUE, "retry", member, 60.0)
    now = await redis_now(store)

    await run_raw(store, "move_member", [keys.retry(QUEUE), keys.dead(QUEUE)],
                  [member, member, "0", repr(now - 86_400)])

    [(_, score)] = await scored(store, keys.dead(QUEUE))
    assert score == pytest.approx(now, abs=5)


async def test_another_queues_sets_are_not_touched(store: Store, keys: Keys) -> None:
    # One retry and one dead set per queue: the same entry in another queue's retry set
    # is another entry, and stays where it is.
    member = make_job()
    await store.file_entry(QUEUE, "retry", member, 60.0)
    await store.file_entry("reports", "retry", member, 60.0)

    assert await store.move_member("reports", "retry", "dead", member, member) is True

    assert [m for m, _ in await scored(store, keys.retry(QUEUE))] == [member]
    assert await store.client.exists(keys.dead(QUEUE)) == 0
    assert [m for m, _ in await scored(store, keys.dead("reports"))] == [member]
