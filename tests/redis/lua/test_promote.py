"""promote.lua: due members of a queue's schedule/retry set onto that queue, written
before removed. One zset feeds its one queue (the same slot): every member goes there,
whatever its payload says."""

from __future__ import annotations

import json

from cogworker_async.jobs.status import LIVE_TTL
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from cogworker_async.settings import KEEP_STATUS
from tests.redis.lua.helpers import (
    NOT_UTF8,
    items,
    jid_of,
    make_job,
    plant_wrong_type,
    redis_now,
    run_raw,
    scored,
    still_planted,
    stored_record,
)

IDENTITY = "host:1:abc"


def renewed(member: bytes) -> bytes:
    """The job to push: the same job with ``enqueued_at`` renewed (as the poller does)."""
    return json.dumps({**json.loads(member), "enqueued_at": 1_800_000_000.0}).encode()


async def scheduled(store: Store, queue: str, count: int = 1) -> list[bytes]:
    """``count`` due jobs in ``queue``'s schedule, a second apart (earliest first)."""
    now = await redis_now(store)
    members = [make_job(queue) for _ in range(count)]
    for offset, member in enumerate(members):
        await store.schedule(queue, [member], at=now - 100 + offset)
    return members


async def test_moves_the_jobs_onto_the_sets_queue_and_out_of_the_set(
    store: Store, keys: Keys
) -> None:
    a, b = await scheduled(store, "emails", 2)
    [other] = await scheduled(store, "reports")

    moved = await store.promote("emails", "schedule", [(a, renewed(a)), (b, renewed(b))])

    assert moved == 2
    assert await items(store, keys.queue("emails")) == [renewed(b), renewed(a)]
    assert await store.client.exists(keys.schedule("emails")) == 0
    # Another queue's set is another slot's: untouched.
    assert [m for m, _ in await scored(store, keys.schedule("reports"))] == [other]
    assert await store.client.exists(keys.queue("reports")) == 0
    # The names were recorded when the jobs were scheduled (Store.schedule).
    assert await store.client.smembers(keys.queues) == {b"emails", b"reports"}


async def test_every_member_goes_to_the_sets_queue_whatever_its_payload_says(
    store: Store, keys: Keys
) -> None:
    # The payload's "queue" field names no key any more: a job is in its queue's slot.
    member = make_job("reports")
    await store.client.zadd(keys.schedule("emails"), {member: 1.0})

    assert await store.promote("emails", "schedule", [(member, member)]) == 1

    assert await items(store, keys.queue("emails")) == [member]
    assert await store.client.exists(keys.queue("reports")) == 0


async def test_the_script_does_not_record_the_queue_name(store: Store, keys: Keys) -> None:
    # The set of queue names is the namespace's slot: the script stays in the queue's,
    # writing the queue's list and the job's record (found by the prefix, same slot).
    member = make_job("emails")
    record = keys.record("emails", jid_of(member))
    await store.client.zadd(keys.schedule("emails"), {member: 1.0})
    await store.client.hset(record, "state", "scheduled")  # as earlier builds wrote it: a key
    await store.client.expire(record, 3600)

    moved = await run_raw(store, "promote", [keys.schedule("emails"), keys.queue("emails")],
                          [keys.wake_channel, "emails", keys.record_prefix("emails"),
                           "1700000000.0", KEEP_STATUS, LIVE_TTL, "0", member, member])

    assert moved == 1
    # The record moved to the queue's live hash (same slot), its key gone.
    assert sorted(await store.client.keys(f"{keys.namespace}:*")) == sorted(
        [keys.queue("emails").encode(), keys.live_records("emails").encode()])
    assert (await stored_record(store.client, keys, "emails", jid_of(member)))["state"] == "queued"


async def test_due_jobs_are_fetched_in_the_order_they_were_due(store: Store) -> None:
    members = await scheduled(store, "emails", 3)

    await store.promote("emails", "schedule", [(m, m) for m in members])

    fetched = await store.fetch(IDENTITY, ["emails"], 3)
    assert [raw for _, raw in fetched.jobs] == members


async def test_wakes_idle_workers_with_the_queues_name(store: Store, keys: Keys) -> None:
    [member] = await scheduled(store, "emails")
    pubsub = store.client.pubsub()
    await pubsub.subscribe(keys.wake_channel)
    try:
        assert (await pubsub.get_message(timeout=5.0))["type"] == "subscribe"

        await store.promote("emails", "schedule", [(member, member)])

        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    assert message is not None
    assert message["channel"] == keys.wake_channel.encode()
    assert message["data"] == b"emails"


async def test_a_second_poller_with_the_same_items_moves_nothing(
    store: Store, keys: Keys
) -> None:
    [member] = await scheduled(store, "emails")
    batch = [(member, renewed(member))]
    await store.promote("emails", "schedule", batch)

    assert await store.promote("emails", "schedule", batch) == 0

    assert await items(store, keys.queue("emails")) == [renewed(member)]


async def test_a_member_no_longer_in_the_set_is_skipped(store: Store, keys: Keys) -> None:
    kept, deleted = await scheduled(store, "emails", 2)
    await store.client.zrem(keys.schedule("emails"), deleted)  # an admin deleted it meanwhile

    moved = await store.promote("emails", "schedule", [(deleted, deleted), (kept, kept)])

    assert moved == 1
    assert await items(store, keys.queue("emails")) == [kept]


async def test_retry_set_jobs_are_promoted_too(store: Store, keys: Keys) -> None:
    member = make_job("emails", retry_count=1)
    await store.file_entry("emails", "retry", member, -1.0)

    assert await store.promote("emails", "retry", [(member, member)]) == 1

    assert await store.client.exists(keys.retry("emails")) == 0
    assert await items(store, keys.queue("emails")) == [member]


async def test_no_items_moves_nothing(store: Store, keys: Keys) -> None:
    await scheduled(store, "emails")

    assert await store.promote("emails", "schedule", []) == 0

    assert await store.client.zcard(keys.schedule("emails")) == 1


async def test_a_job_that_is_not_utf8_is_moved_byte_for_byte(store: Store, keys: Keys) -> None:
    await store.schedule("default", [NOT_UTF8], at=1.0)

    assert await store.promote("default", "schedule", [(NOT_UTF8, NOT_UTF8)]) == 1

    assert await items(store, keys.queue("default")) == [NOT_UTF8]
    assert await store.client.exists(keys.schedule("default")) == 0


async def test_a_queue_of_the_wrong_type_keeps_its_jobs_and_blocks_no_other_queue(
    store: Store, keys: Keys
) -> None:
    # The broken queue's due jobs stay in its schedule (never lost, looked at again on
    # the next poll); another queue's set is promoted on its own, unhindered.
    stuck = await scheduled(store, "broken", 2)
    [fine] = await scheduled(store, "emails")
    await plant_wrong_type(store, keys.queue("broken"))

    assert await store.promote("broken", "schedule", [(m, m) for m in stuck]) == 0
    assert await store.promote("emails", "schedule", [(fine, fine)]) == 1

    assert [member for member, _ in await scored(store, keys.schedule("broken"))] == stuck
    assert await items(store, keys.queue("emails")) == [fine]
    assert await still_planted(store, keys.queue("broken"))


async def test_a_queues_set_of_the_wrong_type_never_pushes_a_job_twice(
    store: Store, keys: Keys
) -> None:
    # The set of queue names is bookkeeping: the job is pushed once, and the pushed job
    # leaves the zset (else every poll would push it again, and it would run again).
    [member] = await scheduled(store, "emails")
    await store.client.delete(keys.queues)
    await plant_wrong_type(store, keys.queues)

    for _ in range(2):  # two polls
        await store.promote("emails", "schedule", [(member, member)])

    assert await items(store, keys.queue("emails")) == [member]
    assert await store.client.exists(keys.schedule("emails")) == 0
