"""give_back.lua: a job that never started goes back to the front of its queue."""

from __future__ import annotations

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


async def test_the_job_is_fetched_next_before_those_waiting(store: Store, keys: Keys) -> None:
    first, waiting = make_job("emails"), make_job("emails")
    await store.enqueue("emails", [first, waiting])
    [(_, raw)] = (await store.fetch(IDENTITY, ["emails"], 1)).jobs

    assert await store.give_back(IDENTITY, "emails", raw) is True

    assert await store.client.exists(keys.in_progress("emails", IDENTITY)) == 0
    again = await store.fetch(IDENTITY, ["emails"], 2)
    assert [job for _, job in again.jobs] == [first, waiting]


async def test_a_second_call_after_a_lost_reply_changes_nothing(store: Store, keys: Keys) -> None:
    raw, other = await fetched(store, IDENTITY, [make_job(), make_job()])
    await store.give_back(IDENTITY, QUEUE, raw)

    assert await store.give_back(IDENTITY, QUEUE, raw) is False

    assert await items(store, keys.queue(QUEUE)) == [raw]
    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [other]


async def test_a_job_not_in_progress_is_not_pushed(store: Store, keys: Keys) -> None:
    assert await store.give_back(IDENTITY, QUEUE, make_job()) is False

    assert await store.client.exists(keys.queue(QUEUE)) == 0


async def test_a_job_that_is_not_utf8_goes_back_byte_for_byte(store: Store, keys: Keys) -> None:
    [raw] = await fetched(store, IDENTITY, [NOT_UTF8])

    assert await store.give_back(IDENTITY, QUEUE, raw) is True

    assert await items(store, keys.queue(QUEUE)) == [NOT_UTF8]
    assert await store.client.exists(keys.in_progress(QUEUE, IDENTITY)) == 0


async def test_a_queue_of_the_wrong_type_leaves_the_job_in_progress(
    store: Store, keys: Keys
) -> None:
    [raw] = await fetched(store, IDENTITY, [make_job("emails")], queue="emails")
    await plant_wrong_type(store, keys.queue("emails"))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.give_back(IDENTITY, "emails", raw)

    assert await items(store, keys.in_progress("emails", IDENTITY)) == [raw]
    assert await still_planted(store, keys.queue("emails"))
