"""file_unsettled.lua: a live process files a record handed over by a stopping process
in the queue's retry or dead set (score = Redis TIME + delay), head first, then pops it.
"""

from __future__ import annotations

import json

import pytest
import redis

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import (
    NOT_UTF8,
    fetched,
    items,
    make_job,
    plant_wrong_type,
    redis_now,
    run_raw,
    scored,
    still_planted,
)

IDENTITY = "host:1:abc"
QUEUE = "default"


def failed_entry(raw: bytes) -> bytes:
    payload = json.loads(raw)
    payload.update(error_class="ValueError", error_message="boom", retry_count=1)
    return json.dumps(payload).encode()


def record(entry: bytes, target: str = "retry", delay: float = 30.0) -> bytes:
    return json.dumps({"set": target, "delay": delay, "payload": entry.decode()}).encode()


async def handed_over(store: Store, keys: Keys, *records: bytes) -> None:
    await store.client.rpush(keys.unsettled(QUEUE), *records)


async def test_files_the_head_in_retry_after_the_delay_by_redis_time(
    store: Store, keys: Keys
) -> None:
    entry, other = failed_entry(make_job()), failed_entry(make_job())
    await handed_over(store, keys, record(entry), record(other))

    before = await redis_now(store)
    assert await store.file_unsettled(QUEUE, record(entry), "retry", entry, 30.0) is True
    after = await redis_now(store)

    [(member, score)] = await scored(store, keys.retry(QUEUE))
    assert member == entry
    assert before + 30.0 <= score <= after + 30.0
    assert await items(store, keys.unsettled(QUEUE)) == [record(other)]


async def test_files_in_dead_at_the_time_of_filing(store: Store, keys: Keys) -> None:
    entry = failed_entry(make_job())
    await handed_over(store, keys, record(entry, "dead", 0.0))

    before = await redis_now(store)
    assert await store.file_unsettled(QUEUE, record(entry, "dead", 0.0), "dead", entry, 0.0) is True
    after = await redis_now(store)

    [(member, score)] = await scored(store, keys.dead(QUEUE))
    assert member == entry
    assert before <= score <= after
    assert await store.client.exists(keys.unsettled(QUEUE), keys.retry(QUEUE)) == 0


async def test_a_record_that_is_not_the_head_is_not_filed(store: Store, keys: Keys) -> None:
    head, second = failed_entry(make_job()), failed_entry(make_job())
    await handed_over(store, keys, record(head), record(second))

    assert await store.file_unsettled(QUEUE, record(second), "retry", second, 30.0) is False

    assert await store.client.exists(keys.retry(QUEUE)) == 0
    assert await items(store, keys.unsettled(QUEUE)) == [record(head), record(second)]


async def test_a_second_call_after_a_lost_reply_changes_nothing(
    store: Store, keys: Keys
) -> None:
    entry, other = failed_entry(make_job()), failed_entry(make_job())
    await handed_over(store, keys, record(entry), record(other))
    await store.file_unsettled(QUEUE, record(entry), "retry", entry, 30.0)
    filed = await scored(store, keys.retry(QUEUE))

    assert await store.file_unsettled(QUEUE, record(entry), "retry", entry, 30.0) is False

    assert await scored(store, keys.retry(QUEUE)) == filed
    assert await items(store, keys.unsettled(QUEUE)) == [record(other)]


async def test_nothing_handed_over_is_a_no_op(store: Store, keys: Keys) -> None:
    entry = failed_entry(make_job())

    assert await store.file_unsettled(QUEUE, record(entry), "retry", entry, 30.0) is False

    assert await store.client.exists(keys.retry(QUEUE)) == 0


async def test_a_record_that_is_not_utf8_is_found_byte_for_byte(
    store: Store, keys: Keys
) -> None:
    # Unreadable records are filed in dead as they are (the entry keeps their bytes).
    await handed_over(store, keys, NOT_UTF8)
    mangled = NOT_UTF8.decode("utf-8", "replace").encode()
    entry = b'{"jid": "x", "class": null, "raw": "\xff\xfe"}'

    assert await store.file_unsettled(QUEUE, mangled, "dead", entry, 0.0) is False
    assert await store.file_unsettled(QUEUE, NOT_UTF8, "dead", entry, 0.0) is True

    assert [m for m, _ in await scored(store, keys.dead(QUEUE))] == [entry]
    assert await store.client.exists(keys.unsettled(QUEUE)) == 0


async def test_a_destination_of_the_wrong_type_leaves_the_record_handed_over(
    store: Store, keys: Keys
) -> None:
    # Written before removed: Redis does not roll a script back.
    entry = failed_entry(make_job())
    await handed_over(store, keys, record(entry))
    await plant_wrong_type(store, keys.retry(QUEUE))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.file_unsettled(QUEUE, record(entry), "retry", entry, 30.0)

    assert await items(store, keys.unsettled(QUEUE)) == [record(entry)]
    assert await still_planted(store, keys.retry(QUEUE))


@pytest.mark.parametrize("delay", [float("nan"), float("inf")])
async def test_a_delay_that_is_not_a_finite_number_files_at_once(
    store: Store, keys: Keys, delay: float
) -> None:
    # A corrupt record must neither block every record behind it (NaN: an error, the
    # head never filed) nor be filed where it never comes due (inf).
    entry, behind = failed_entry(make_job()), failed_entry(make_job())
    await handed_over(store, keys, b"corrupt record", record(behind))

    before = await redis_now(store)
    assert await store.file_unsettled(QUEUE, b"corrupt record", "retry", entry, delay) is True
    after = await redis_now(store)

    [(member, score)] = await scored(store, keys.retry(QUEUE))
    assert member == entry
    assert before <= score <= after
    assert await items(store, keys.unsettled(QUEUE)) == [record(behind)]


async def test_the_callers_clock_is_only_a_fallback(store: Store, keys: Keys) -> None:
    entry = failed_entry(make_job())
    await handed_over(store, keys, record(entry))
    now = await redis_now(store)

    filed = await run_raw(store, "file_unsettled", [keys.unsettled(QUEUE), keys.retry(QUEUE)],
                          [record(entry), entry, "60", repr(now + 86_400)])

    assert filed == 1
    [(_, score)] = await scored(store, keys.retry(QUEUE))
    assert score == pytest.approx(now + 60, abs=5)


async def test_a_hand_over_ends_filed_once_and_never_requeued(
    store: Store, keys: Keys
) -> None:
    # The whole way: a stopping process parks its unfiled failure, a live one files it.
    failed, running = await fetched(store, IDENTITY, [make_job(), make_job()])
    entry = failed_entry(failed)
    assert await store.park_unsettled(IDENTITY, QUEUE, failed, record(entry)) is True

    for handed in await store.list_head(keys.unsettled(QUEUE), 100):
        parsed = json.loads(handed)
        assert await store.file_unsettled(QUEUE, handed, parsed["set"], parsed["payload"].encode(),
                                          parsed["delay"]) is True

    assert [m for m, _ in await scored(store, keys.retry(QUEUE))] == [entry]
    assert await store.client.exists(keys.unsettled(QUEUE), keys.queue(QUEUE)) == 0
    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [running]
