"""enqueue.lua: push jobs on one queue, wake idle workers. The queue's name is recorded
by ``Store.enqueue`` (``register_queues``: the namespace's slot, not the queue's)."""

from __future__ import annotations

import pytest
import redis
from redis.crc import key_slot

from cogworker_async.errors import WrongTypeKey
from cogworker_async.jobs.status import LIVE_TTL
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import (
    NOT_UTF8,
    items,
    jid_of,
    make_job,
    plant_wrong_type,
    run_raw,
    still_planted,
    stored_record,
)

IDENTITY = "host:1:abc"


async def test_jobs_are_fetched_in_the_order_they_were_enqueued(store: Store) -> None:
    jobs = [make_job("emails") for _ in range(3)]

    length = await store.enqueue("emails", jobs)

    assert length == 3
    fetched = await store.fetch(IDENTITY, ["emails"], 3)
    assert [raw for _, raw in fetched.jobs] == jobs


async def test_returns_the_queue_length_after_the_push(store: Store) -> None:
    await store.enqueue("emails", [make_job("emails"), make_job("emails")])

    assert await store.enqueue("emails", [make_job("emails") for _ in range(3)]) == 5


async def test_no_jobs_pushes_nothing_and_reports_the_current_length(
    store: Store, keys: Keys
) -> None:
    await store.enqueue("emails", [make_job("emails"), make_job("emails")])

    assert await store.enqueue("emails", []) == 2
    assert await store.client.llen(keys.queue("emails")) == 2


async def test_records_each_queue_name(store: Store, keys: Keys) -> None:
    await store.enqueue("emails", [make_job("emails")])
    await store.enqueue("reports", [make_job("reports")])

    assert await store.client.smembers(keys.queues) == {b"emails", b"reports"}
    assert await store.queue_names() == ["emails", "reports"]


async def test_the_script_writes_the_queue_list_and_the_record_only(
    store: Store, keys: Keys
) -> None:
    # Every key it writes is in the queue's slot: the name is the Store's to record.
    job = make_job("emails")
    record = keys.record("emails", jid_of(job))

    reply = await run_raw(store, "enqueue", [keys.queue("emails")], [
        "emails", keys.wake_channel, keys.record_prefix("emails"), LIVE_TTL,
        "1700000000.0", "send_email", "0", "", "", jid_of(job), job])

    assert reply == [1]
    live = keys.live_records("emails")  # the record: a field of the queue's live hash
    assert sorted(await store.client.keys(f"{keys.namespace}:*")) == sorted(
        [keys.queue("emails").encode(), live.encode()])
    assert key_slot(live.encode()) == key_slot(record.encode()) == key_slot(
        keys.queue("emails").encode())
    assert await items(store, keys.queue("emails")) == [job]
    assert (await stored_record(store.client, keys, "emails", jid_of(job)))["state"] == "queued"


async def test_publishes_the_queue_name_on_the_wake_channel(store: Store, keys: Keys) -> None:
    pubsub = store.client.pubsub()
    await pubsub.subscribe(keys.wake_channel)
    try:
        assert (await pubsub.get_message(timeout=5.0))["type"] == "subscribe"

        await store.enqueue("emails", [make_job("emails")])

        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    assert message is not None
    assert message["channel"] == keys.wake_channel.encode()
    assert message["data"] == b"emails"


async def test_more_jobs_than_one_push_chunk_keep_their_order(store: Store) -> None:
    # The script pushes 1,000 arguments at a time (Lua's unpack has a stack limit).
    jobs = [make_job("bulk", n=n) for n in range(2_500)]

    assert await store.enqueue("bulk", jobs) == 2_500

    fetched = await store.fetch(IDENTITY, ["bulk"], 2_500)
    assert [raw for _, raw in fetched.jobs] == jobs


async def test_a_second_call_pushes_the_jobs_again(store: Store, keys: Keys) -> None:
    # Documented as not idempotent: this is why no client retries it blindly.
    job = make_job("emails")

    await store.enqueue("emails", [job])
    await store.enqueue("emails", [job])

    assert await items(store, keys.queue("emails")) == [job, job]


async def test_a_job_that_is_not_utf8_is_stored_byte_for_byte(store: Store, keys: Keys) -> None:
    await store.enqueue("default", [NOT_UTF8])

    assert await items(store, keys.queue("default")) == [NOT_UTF8]


async def test_a_queue_key_of_the_wrong_type_refuses_the_jobs(store: Store, keys: Keys) -> None:
    await plant_wrong_type(store, keys.queue("emails"))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.enqueue("emails", [make_job("emails")])

    assert await still_planted(store, keys.queue("emails"))


async def test_an_error_means_nothing_was_enqueued(store: Store, keys: Keys) -> None:
    # A caller that sees an error may enqueue again: the job must not be there already.
    # The name is recorded before the push, so a queue with jobs is always registered.
    await plant_wrong_type(store, keys.queues)

    with pytest.raises(WrongTypeKey, match="nothing was enqueued") as refused:
        await store.enqueue("emails", [make_job("emails")])
    assert refused.value.key == keys.queues  # named, for the one who deletes it

    assert await store.client.llen(keys.queue("emails")) == 0
    assert await still_planted(store, keys.queues)


async def test_a_queue_name_redis_lost_is_registered_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry of queue names (another slot than the queue's) may be lost — a
    restart without persistence, a failover — while an enqueuer keeps running: a later
    enqueue registers the name again (at most once per ``REGISTER_EVERY``)."""
    await store.enqueue("mail", [b"{}"])
    await store.client.delete(store.keys.queues)
    await store.enqueue("mail", [b"{}"])
    assert await store.client.smembers(store.keys.queues) == set()  # within the minute
    monkeypatch.setattr("cogworker_async.redis.queues.REGISTER_EVERY", 0.0)
    await store.enqueue("mail", [b"{}"])
    assert await store.client.smembers(store.keys.queues) == {b"mail"}
