"""file_failure.lua: file a failed job in its queue's retry or dead set, then take it off
the in-progress list."""

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


def failed_entry(raw: bytes, **changes: object) -> bytes:
    """The payload as the worker files it: the job with its failure recorded."""
    payload = json.loads(raw)
    payload.update({"error_class": "ValueError", "error_message": "boom", **changes})
    return json.dumps(payload).encode()


async def test_files_in_retry_after_the_delay_by_redis_time(store: Store, keys: Keys) -> None:
    raw, other = await fetched(store, IDENTITY, [make_job(), make_job()])
    entry = failed_entry(raw, retry_count=1)

    before = await redis_now(store)
    assert await store.file_failure(IDENTITY, QUEUE, raw, "retry", entry, 30.0) is True
    after = await redis_now(store)

    [(member, score)] = await scored(store, keys.retry(QUEUE))
    assert member == entry
    assert before + 30.0 <= score <= after + 30.0
    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [other]


async def test_files_in_dead_at_the_time_of_death(store: Store, keys: Keys) -> None:
    [raw] = await fetched(store, IDENTITY, [make_job()])
    entry = failed_entry(raw, retry_count=25)

    before = await redis_now(store)
    assert await store.file_failure(IDENTITY, QUEUE, raw, "dead", entry, 0.0) is True
    after = await redis_now(store)

    [(member, score)] = await scored(store, keys.dead(QUEUE))
    assert member == entry
    assert before <= score <= after
    assert await store.client.exists(keys.in_progress(QUEUE, IDENTITY)) == 0


async def test_a_second_call_after_a_lost_reply_changes_nothing(store: Store, keys: Keys) -> None:
    raw, other = await fetched(store, IDENTITY, [make_job(), make_job()])
    entry = failed_entry(raw)
    await store.file_failure(IDENTITY, QUEUE, raw, "retry", entry, 30.0)
    filed = await scored(store, keys.retry(QUEUE))

    assert await store.file_failure(IDENTITY, QUEUE, raw, "retry", entry, 30.0) is False

    assert await scored(store, keys.retry(QUEUE)) == filed
    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [other]


async def test_a_job_not_in_progress_is_not_filed(store: Store, keys: Keys) -> None:
    stranger = make_job()

    filed = await store.file_failure(IDENTITY, QUEUE, stranger, "dead", failed_entry(stranger), 0)

    assert filed is False
    assert await store.client.exists(keys.dead(QUEUE)) == 0


async def test_a_job_that_is_not_utf8_is_found_byte_for_byte(store: Store, keys: Keys) -> None:
    [raw] = await fetched(store, IDENTITY, [NOT_UTF8])
    entry = json.dumps({"jid": "x", "class": None, "error_class": "UnparseablePayload"}).encode()

    assert await store.file_failure(IDENTITY, QUEUE, raw, "dead", entry, 0.0) is True

    assert [member for member, _ in await scored(store, keys.dead(QUEUE))] == [entry]
    assert await store.client.exists(keys.in_progress(QUEUE, IDENTITY)) == 0


async def test_a_destination_of_the_wrong_type_leaves_the_job_in_progress(
    store: Store, keys: Keys
) -> None:
    # Redis does not roll a script back: the script writes before it removes, so an
    # error on the write leaves the job where it was.
    [raw] = await fetched(store, IDENTITY, [make_job()])
    await plant_wrong_type(store, keys.retry(QUEUE))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.file_failure(IDENTITY, QUEUE, raw, "retry", failed_entry(raw), 5.0)

    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [raw]
    assert await still_planted(store, keys.retry(QUEUE))


async def test_the_callers_clock_is_only_a_fallback(store: Store, keys: Keys) -> None:
    [raw] = await fetched(store, IDENTITY, [make_job()])
    entry = failed_entry(raw)
    now = await redis_now(store)

    filed = await run_raw(store, "file_failure",
                          [keys.in_progress(QUEUE, IDENTITY), keys.retry(QUEUE)],
                          [raw, entry, "60", repr(now + 86_400)])

    assert filed == 1
    [(_, score)] = await scored(store, keys.retry(QUEUE))
    assert score == pytest.approx(now + 60, abs=5)
