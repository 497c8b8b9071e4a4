"""park_unsettled.lua: at shutdown, a job that ran and failed but whose failure could not
be filed is handed over to the unsettled list for a live process to file — never
requeued, which would run it again.
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
    still_planted,
)

IDENTITY = "host:1:abc"
QUEUE = "default"


def record(raw: bytes, target: str = "retry", delay: float = 30.0) -> bytes:
    """The hand-over record of a failed job: where to file it, and what."""
    payload = json.loads(raw)
    payload.update(error_class="ValueError", error_message="boom", retry_count=1)
    return json.dumps({"set": target, "delay": delay, "payload": json.dumps(payload)}).encode()


async def test_hands_the_job_over_and_takes_it_off_the_list(store: Store, keys: Keys) -> None:
    failed, running = await fetched(store, IDENTITY, [make_job(), make_job()])

    assert await store.park_unsettled(IDENTITY, QUEUE, failed, record(failed)) is True

    assert await items(store, keys.unsettled(QUEUE)) == [record(failed)]
    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [running]
    assert await store.client.exists(keys.queue(QUEUE)) == 0, "never requeued"


async def test_records_are_filed_in_the_order_they_were_handed_over(
    store: Store, keys: Keys
) -> None:
    first, second = await fetched(store, IDENTITY, [make_job(), make_job()])
    await store.client.rpush(keys.unsettled(QUEUE), b"from another process")

    await store.park_unsettled(IDENTITY, QUEUE, first, record(first))
    await store.park_unsettled(IDENTITY, QUEUE, second, record(second, "dead", 0.0))

    # Appended at the tail: the filer takes the head, so earlier records go first.
    assert await items(store, keys.unsettled(QUEUE)) == [
        b"from another process", record(first), record(second, "dead", 0.0)]
    assert await store.client.exists(keys.in_progress(QUEUE, IDENTITY)) == 0


async def test_a_job_not_in_progress_is_not_handed_over(store: Store, keys: Keys) -> None:
    [running] = await fetched(store, IDENTITY, [make_job()])
    stranger = make_job()

    assert await store.park_unsettled(IDENTITY, QUEUE, stranger, record(stranger)) is False

    assert await store.client.exists(keys.unsettled(QUEUE)) == 0
    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [running]


async def test_a_second_call_after_a_lost_reply_changes_nothing(
    store: Store, keys: Keys
) -> None:
    failed, running = await fetched(store, IDENTITY, [make_job(), make_job()])
    await store.park_unsettled(IDENTITY, QUEUE, failed, record(failed))

    assert await store.park_unsettled(IDENTITY, QUEUE, failed, record(failed)) is False

    assert await items(store, keys.unsettled(QUEUE)) == [record(failed)]
    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [running]


async def test_a_job_that_is_not_utf8_is_found_byte_for_byte(store: Store, keys: Keys) -> None:
    [raw] = await fetched(store, IDENTITY, [NOT_UTF8])
    handed_over = b'{"set": "dead", "delay": 0, "payload": "\xff\xfe"}'

    mangled = NOT_UTF8.decode("utf-8", "replace").encode()
    assert await store.park_unsettled(IDENTITY, QUEUE, mangled, handed_over) is False
    assert await store.park_unsettled(IDENTITY, QUEUE, raw, handed_over) is True

    assert await items(store, keys.unsettled(QUEUE)) == [handed_over]
    assert await store.client.exists(keys.in_progress(QUEUE, IDENTITY)) == 0


async def test_an_unsettled_list_of_the_wrong_type_leaves_the_job_in_progress(
    store: Store, keys: Keys
) -> None:
    # Written before removed: what cannot be handed over stays on the list.
    [failed] = await fetched(store, IDENTITY, [make_job()])
    await plant_wrong_type(store, keys.unsettled(QUEUE))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.park_unsettled(IDENTITY, QUEUE, failed, record(failed))

    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [failed]
    assert await still_planted(store, keys.unsettled(QUEUE))
