"""ack.lua: forget jobs that ran, and clear their orphan counters."""

from __future__ import annotations

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import NOT_UTF8, fetched, items, jid_of, make_job, plant_wrong_type

IDENTITY = "host:1:abc"
QUEUE = "default"


async def test_removes_the_jobs_and_only_them(store: Store, keys: Keys) -> None:
    done1, done2, running = await fetched(store, IDENTITY, [make_job(), make_job(), make_job()])

    removed = await store.ack(IDENTITY, QUEUE, [(done1, jid_of(done1)), (done2, jid_of(done2))])

    assert removed == 2
    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [running]


async def test_clears_the_orphan_counter_of_each_acked_job(store: Store, keys: Keys) -> None:
    done, running = await fetched(store, IDENTITY, [make_job(), make_job()])
    await store.client.set(keys.orphanings(QUEUE, jid_of(done)), 2)
    await store.client.set(keys.orphanings(QUEUE, jid_of(running)), 1)

    await store.ack(IDENTITY, QUEUE, [(done, jid_of(done))])

    assert await store.client.exists(keys.orphanings(QUEUE, jid_of(done))) == 0
    assert await store.client.get(keys.orphanings(QUEUE, jid_of(running))) == b"1"


async def test_a_late_ack_that_finds_nothing_leaves_the_orphan_counter(
    store: Store, keys: Keys
) -> None:
    # A process declared dead (fenced after a partition) acks a job recovered and now
    # running elsewhere: the count of its orphanings belongs to that copy.
    [job] = await fetched(store, IDENTITY, [make_job()])
    await store.client.set(keys.orphanings(QUEUE, jid_of(job)), 2)

    assert await store.ack("another:2:zombie", QUEUE, [(job, jid_of(job))]) == 0

    assert await store.client.get(keys.orphanings(QUEUE, jid_of(job))) == b"2"


async def test_only_the_queues_own_list_and_counters_are_touched(
    store: Store, keys: Keys
) -> None:
    # One list per (queue, process): an ack on one queue never reaches another's slot.
    [here] = await fetched(store, IDENTITY, [make_job("emails")], queue="emails")
    [there] = await fetched(store, IDENTITY, [make_job("reports")], queue="reports")
    await store.client.set(keys.orphanings("reports", jid_of(here)), 1)

    assert await store.ack(IDENTITY, "reports", [(here, jid_of(here))]) == 0

    assert await items(store, keys.in_progress("emails", IDENTITY)) == [here]
    assert await items(store, keys.in_progress("reports", IDENTITY)) == [there]
    assert await store.ack(IDENTITY, "emails", [(here, jid_of(here))]) == 1
    assert await store.client.exists(keys.in_progress("emails", IDENTITY)) == 0


async def test_a_second_ack_after_a_lost_reply_changes_nothing(store: Store, keys: Keys) -> None:
    done, running = await fetched(store, IDENTITY, [make_job(), make_job()])
    await store.ack(IDENTITY, QUEUE, [(done, jid_of(done))])
    before = await items(store, keys.in_progress(QUEUE, IDENTITY))

    assert await store.ack(IDENTITY, QUEUE, [(done, jid_of(done))]) == 0

    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == before == [running]


async def test_a_job_not_in_progress_is_not_an_error(store: Store, keys: Keys) -> None:
    [running] = await fetched(store, IDENTITY, [make_job()])
    stranger = make_job()

    assert await store.ack(IDENTITY, QUEUE, [(stranger, jid_of(stranger))]) == 0

    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == [running]


async def test_a_job_that_is_not_utf8_is_found_byte_for_byte(store: Store, keys: Keys) -> None:
    # An unparseable job, already filed in dead, is acked without a jid.
    [raw] = await fetched(store, IDENTITY, [NOT_UTF8])

    assert await store.ack(IDENTITY, QUEUE, [(raw, None)]) == 1

    assert await store.client.exists(keys.in_progress(QUEUE, IDENTITY)) == 0


async def test_an_orphan_counter_of_the_wrong_type_does_not_stop_the_ack(
    store: Store, keys: Keys
) -> None:
    [done] = await fetched(store, IDENTITY, [make_job()])
    await plant_wrong_type(store, keys.orphanings(QUEUE, jid_of(done)))

    assert await store.ack(IDENTITY, QUEUE, [(done, jid_of(done))]) == 1

    assert await store.client.exists(keys.in_progress(QUEUE, IDENTITY)) == 0
