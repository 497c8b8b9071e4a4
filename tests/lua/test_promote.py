"""promote.lua: due members of schedule/retry onto their queues, written before removed."""

from __future__ import annotations

import json

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.lua.helpers import (
    NOT_UTF8,
    items,
    make_job,
    plant_wrong_type,
    redis_now,
    scored,
    still_planted,
)

IDENTITY = "host:1:abc"


def renewed(member: bytes) -> bytes:
    """The job to push: the same job with ``enqueued_at`` renewed (as the poller does)."""
    return json.dumps({**json.loads(member), "enqueued_at": 1_800_000_000.0}).encode()


async def scheduled(store: Store, *queues: str) -> list[bytes]:
    """One due job per queue name, scheduled a second apart (earliest first)."""
    now = await redis_now(store)
    members = [make_job(queue) for queue in queues]
    for offset, member in enumerate(members):
        await store.schedule([member], at=now - 100 + offset)
    return members


async def test_moves_each_job_onto_its_queue_and_out_of_the_set(
    store: Store, keys: Keys
) -> None:
    a, b = await scheduled(store, "emails", "reports")

    moved = await store.promote("schedule", [(a, renewed(a), "emails"), (b, renewed(b), "reports")])

    assert moved == 2
    assert await items(store, keys.queue("emails")) == [renewed(a)]
    assert await items(store, keys.queue("reports")) == [renewed(b)]
    assert await store.client.exists(keys.schedule) == 0
    assert await store.client.smembers(keys.queues) == {b"emails", b"reports"}


async def test_due_jobs_are_fetched_in_the_order_they_were_due(store: Store) -> None:
    members = await scheduled(store, "emails", "emails", "emails")

    await store.promote("schedule", [(m, m, "emails") for m in members])

    fetched = await store.fetch(IDENTITY, ["emails"], 3)
    assert [raw for _, raw in fetched.jobs] == members


async def test_wakes_idle_workers(store: Store, keys: Keys) -> None:
    [member] = await scheduled(store, "emails")
    pubsub = store.client.pubsub()
    await pubsub.subscribe(keys.wake_channel)
    try:
        assert (await pubsub.get_message(timeout=5.0))["type"] == "subscribe"

        await store.promote("schedule", [(member, member, "emails")])

        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
    finally:
        await pubsub.aclose()
    assert message is not None
    assert message["channel"] == keys.wake_channel.encode()


async def test_a_second_poller_with_the_same_items_moves_nothing(
    store: Store, keys: Keys
) -> None:
    [member] = await scheduled(store, "emails")
    batch = [(member, renewed(member), "emails")]
    await store.promote("schedule", batch)

    assert await store.promote("schedule", batch) == 0

    assert await items(store, keys.queue("emails")) == [renewed(member)]


async def test_a_member_no_longer_in_the_set_is_skipped(store: Store, keys: Keys) -> None:
    kept, deleted = await scheduled(store, "emails", "emails")
    await store.client.zrem(keys.schedule, deleted)  # e.g. an admin deleted it meanwhile

    moved = await store.promote("schedule", [(deleted, deleted, "emails"), (kept, kept, "emails")])

    assert moved == 1
    assert await items(store, keys.queue("emails")) == [kept]


async def test_retry_set_jobs_are_promoted_too(store: Store, keys: Keys) -> None:
    member = make_job("emails", retry_count=1)
    await store.file_entry("retry", member, -1.0)

    assert await store.promote("retry", [(member, member, "emails")]) == 1

    assert await store.client.exists(keys.retry) == 0
    assert await items(store, keys.queue("emails")) == [member]


async def test_no_items_moves_nothing(store: Store, keys: Keys) -> None:
    await scheduled(store, "emails")

    assert await store.promote("schedule", []) == 0

    assert await store.client.zcard(keys.schedule) == 1


async def test_a_job_that_is_not_utf8_is_moved_byte_for_byte(store: Store, keys: Keys) -> None:
    await store.schedule([NOT_UTF8], at=1.0)

    assert await store.promote("schedule", [(NOT_UTF8, NOT_UTF8, "default")]) == 1

    assert await items(store, keys.queue("default")) == [NOT_UTF8]
    assert await store.client.exists(keys.schedule) == 0


async def test_a_queue_of_the_wrong_type_keeps_its_job_and_blocks_no_other(
    store: Store, keys: Keys
) -> None:
    # The earliest due job's queue is broken: it stays in the schedule (never lost), and
    # the jobs due after it still reach their queues (the poller would otherwise retry
    # the same failing batch forever).
    stuck, fine = await scheduled(store, "broken", "emails")
    await plant_wrong_type(store, keys.queue("broken"))

    moved = await store.promote("schedule", [(stuck, stuck, "broken"), (fine, fine, "emails")])

    assert moved == 1
    assert [member for member, _ in await scored(store, keys.schedule)] == [stuck]
    assert await items(store, keys.queue("emails")) == [fine]
    assert await still_planted(store, keys.queue("broken"))


async def test_a_queues_set_of_the_wrong_type_never_pushes_a_job_twice(
    store: Store, keys: Keys
) -> None:
    # The set of queue names is bookkeeping: the job is pushed once, and the pushed job
    # leaves the zset (else every poll would push it again, and it would run again).
    [member] = await scheduled(store, "emails")
    await plant_wrong_type(store, keys.queues)

    for _ in range(2):  # two polls
        await store.promote("schedule", [(member, member, "emails")])

    assert await items(store, keys.queue("emails")) == [member]
    assert await store.client.exists(keys.schedule) == 0
