"""requeue.lua: jobs left on an in-progress list back onto that list's queue.

Two modes: unconditional (``Store.requeue``: this process's own list on shutdown) and
recovery (``Store.recover`` with ``dead_for=seconds``: another process's list, only once
that process is dead by Redis' clock, as seen by the queue's slot; each jid's orphanings
are counted). One list holds one queue's jobs, and they go back to that queue (KEYS[5]),
whatever their payload says.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import (
    MAX_DECLARED,
    ORPHAN_TTL,
    REQUEUE_BATCH,
    Requeued,
    as_bytes,
)
from cogworker_async.redis.store import Store
from cogworker_async.settings import KEEP_STATUS
from tests.redis.lua.helpers import (
    NOT_UTF8,
    fetched,
    items,
    jid_of,
    make_job,
    plant_wrong_type,
    redis_now,
    run_raw,
    still_planted,
)

OWNER = "dead-host:7:f00"
QUEUE = "default"
DEAD_FOR = 60.0
MAX_ORPHANINGS = 3


async def recover(
    store: Store, queue: str = QUEUE, *, max_orphanings: int = MAX_ORPHANINGS
) -> Requeued | None:
    """Orphan recovery of OWNER's list for ``queue``, as a live process runs it."""
    return await store.recover(OWNER, queue, dead_for=DEAD_FOR, max_orphanings=max_orphanings)


async def fetched_from(store: Store, queues: list[str]) -> list[bytes]:
    """One job per entry of ``queues`` (on that queue), fetched in that order by OWNER."""
    jobs = [make_job(queue) for queue in queues]
    for queue, job in zip(queues, jobs, strict=True):
        await store.enqueue(queue, [job])
    result = await store.fetch(OWNER, list(dict.fromkeys(queues)), len(jobs))
    assert sorted(raw for _, raw in result.jobs) == sorted(jobs)
    return jobs


async def plant(store: Store, keys: Keys, *raws: bytes, queue: str = QUEUE) -> None:
    """Put raws on OWNER's list for ``queue`` as fetch would have (the last one fetched at
    the head)."""
    await store.client.lpush(keys.in_progress(queue, OWNER), *raws)


async def fetch_all(store: Store, queue: str, count: int = 10_000) -> list[bytes]:
    return [raw for _, raw in (await store.fetch("next-worker", [queue], count)).jobs]


async def orphanings(store: Store, keys: Keys, raw: bytes, queue: str = QUEUE) -> bytes | None:
    value = await store.client.get(keys.orphanings(queue, jid_of(raw)))
    return None if value is None else as_bytes(value)


# -- unconditional: this process's own list, on shutdown ----------------------------------


async def test_requeues_everything_and_the_fetch_order_is_kept(store: Store, keys: Keys) -> None:
    jobs = [make_job() for _ in range(4)]
    await store.enqueue(QUEUE, jobs)
    await store.fetch(OWNER, [QUEUE], 3)

    assert await store.requeue(OWNER, QUEUE) == 3

    assert await store.client.exists(keys.in_progress(QUEUE, OWNER)) == 0
    # Back in front of the job that was still waiting, oldest first.
    assert await fetch_all(store, QUEUE) == jobs


async def test_each_list_goes_back_to_its_own_queue(store: Store, keys: Keys) -> None:
    emails, reports = await fetched_from(store, ["emails", "reports"])

    assert await store.requeue(OWNER, "emails") == 1

    assert await items(store, keys.queue("emails")) == [emails]
    assert await store.client.exists(keys.queue("reports")) == 0
    assert await items(store, keys.in_progress("reports", OWNER)) == [reports]

    assert await store.requeue(OWNER, "reports") == 1

    assert await items(store, keys.queue("reports")) == [reports]
    assert await store.client.exists(keys.in_progress("emails", OWNER),
                                     keys.in_progress("reports", OWNER)) == 0


async def test_own_list_is_requeued_though_alive_and_not_counted_as_orphaned(
    store: Store, keys: Keys
) -> None:
    [job] = await fetched(store, OWNER, [make_job()])
    await store.client.set(keys.queue_process(QUEUE, OWNER), "alive")
    await store.client.hset(keys.queue_last_beat(QUEUE), OWNER, repr(await redis_now(store)))

    assert await store.requeue(OWNER, QUEUE) == 1

    assert await items(store, keys.queue(QUEUE)) == [job]
    assert await orphanings(store, keys, job) is None


async def test_a_second_call_finds_nothing_to_do(store: Store, keys: Keys) -> None:
    jobs = await fetched(store, OWNER, [make_job(), make_job()])
    await store.requeue(OWNER, QUEUE)

    assert await store.requeue(OWNER, QUEUE) == 0

    assert await fetch_all(store, QUEUE) == jobs


async def test_dropped_jobs_are_removed_not_requeued_and_their_counter_deleted(
    store: Store, keys: Keys
) -> None:
    # They ran and only their ack failed: dropping them is their ack.
    ran, never_ran = await fetched(store, OWNER, [make_job(), make_job()])
    await store.client.set(keys.orphanings(QUEUE, jid_of(ran)), 1)

    assert await store.requeue(OWNER, QUEUE, drop=[ran]) == 1

    assert await store.client.exists(keys.in_progress(QUEUE, OWNER)) == 0
    assert await items(store, keys.queue(QUEUE)) == [never_ran]
    assert await orphanings(store, keys, ran) is None


async def test_kept_jobs_stay_on_the_list(store: Store, keys: Keys) -> None:
    # Failures that could not be filed: neither requeued (they ran) nor dropped.
    first, unfiled, last = await fetched(store, OWNER, [make_job(), make_job(), make_job()])

    assert await store.requeue(OWNER, QUEUE, keep=[unfiled]) == 2

    assert await items(store, keys.in_progress(QUEUE, OWNER)) == [unfiled]
    assert await fetch_all(store, QUEUE) == [first, last]


async def test_wakes_idle_workers_with_the_queues_name(store: Store, keys: Keys) -> None:
    await fetched(store, OWNER, [make_job("emails")], queue="emails")
    pubsub = store.client.pubsub()
    await pubsub.subscribe(keys.wake_channel)
    try:
        assert (await pubsub.get_message(timeout=5.0))["type"] == "subscribe"

        assert await store.requeue(OWNER, "emails") == 1

        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    assert message is not None
    assert message["channel"] == keys.wake_channel.encode()
    assert message["data"] == b"emails"


# -- recovery: another process's list, once it is dead -------------------------------------


async def test_an_owner_with_a_process_key_is_alive(store: Store, keys: Keys) -> None:
    jobs = await fetched(store, OWNER, [make_job()])
    await store.client.set(keys.queue_process(QUEUE, OWNER), "alive", ex=30)

    assert await recover(store) is None

    assert await items(store, keys.in_progress(QUEUE, OWNER)) == jobs
    assert await store.client.exists(keys.queue(QUEUE)) == 0


async def test_an_owner_with_a_recent_beat_is_alive(store: Store, keys: Keys) -> None:
    # Its process key has expired, but it beat within dead_for: a few missed beats.
    jobs = await fetched(store, OWNER, [make_job()])
    await store.client.hset(keys.queue_last_beat(QUEUE), OWNER, repr(await redis_now(store) - 5))

    assert await recover(store) is None

    assert await items(store, keys.in_progress(QUEUE, OWNER)) == jobs
    assert await store.client.exists(keys.queue(QUEUE)) == 0


async def test_an_owner_with_a_stale_beat_is_dead(store: Store, keys: Keys) -> None:
    jobs = await fetched(store, OWNER, [make_job(), make_job()])
    await store.client.hset(keys.queue_last_beat(QUEUE), OWNER,
                            repr(await redis_now(store) - 3_600))

    assert await recover(store) == Requeued(moved=2)

    assert await store.client.exists(keys.in_progress(QUEUE, OWNER)) == 0
    assert await fetch_all(store, QUEUE) == jobs


async def test_an_owner_with_no_beat_and_no_process_key_is_dead(
    store: Store, keys: Keys
) -> None:
    jobs = await fetched(store, OWNER, [make_job()])

    assert await recover(store) == Requeued(moved=1)

    assert await fetch_all(store, QUEUE) == jobs


@pytest.mark.parametrize("stamp", ["", "soon", "12:30", "1.5e", "nan", "inf"])
async def test_a_stamp_that_is_not_a_finite_number_counts_as_no_stamp(
    store: Store, keys: Keys, stamp: str
) -> None:
    jobs = await fetched(store, OWNER, [make_job()])
    await store.client.hset(keys.queue_last_beat(QUEUE), OWNER, stamp)

    assert await recover(store) == Requeued(moved=1)

    assert await fetch_all(store, QUEUE) == jobs


@pytest.mark.parametrize("planted", ["string", "hash", "list"])
async def test_a_process_key_without_a_ttl_is_no_beat_s_and_the_owner_is_dead(
    store: Store, keys: Keys, planted: str
) -> None:
    # Every beat writes the marker with a TTL: a key there without one is a co-tenant's
    # (or a hand's), and the dead owner's jobs must not wait for it forever.
    jobs = await fetched(store, OWNER, [make_job()])
    marker = keys.queue_process(QUEUE, OWNER)
    if planted == "string":
        await store.client.set(marker, "alive")
    elif planted == "hash":
        await store.client.hset(marker, "alive", "1")
    else:
        await store.client.rpush(marker, "alive")

    assert await recover(store) == Requeued(moved=1)

    assert await fetch_all(store, QUEUE) == jobs


async def test_a_process_key_of_another_type_with_a_ttl_keeps_the_owner_alive_until_it_expires(
    store: Store, keys: Keys
) -> None:
    # Bounded: what has a TTL ends. Until then the owner counts as alive (a beat's
    # marker is never of another type, but a TTL is the bound that matters).
    jobs = await fetched(store, OWNER, [make_job()])
    marker = keys.queue_process(QUEUE, OWNER)
    await store.client.hset(marker, "alive", "1")
    await store.client.pexpire(marker, 60_000)
    assert await recover(store) is None
    await store.client.delete(marker)
    assert await recover(store) == Requeued(moved=1)
    assert await fetch_all(store, QUEUE) == jobs


async def test_a_stamp_far_ahead_of_the_server_s_clock_counts_as_no_stamp(
    store: Store, keys: Keys
) -> None:
    # Beats are stamped by this server's TIME: one a day ahead is no beat's, and would
    # otherwise keep a dead owner alive for that day (or forever: 1e300).
    jobs = await fetched(store, OWNER, [make_job()])
    await store.client.hset(keys.queue_last_beat(QUEUE), OWNER,
                            repr(await redis_now(store) + 86_400))

    assert await recover(store) == Requeued(moved=1)

    assert await fetch_all(store, QUEUE) == jobs


async def test_recovery_declares_the_owner_dead_once_it_took_its_jobs(
    store: Store, keys: Keys
) -> None:
    # A paused process that beats again finds itself there and knows it is a zombie.
    await fetched(store, OWNER, [make_job()])

    await recover(store)

    assert await store.client.smembers(keys.queue_declared_dead(QUEUE)) == {OWNER.encode()}


async def test_the_declared_dead_marks_are_bounded(store: Store, keys: Keys) -> None:
    """Identities are never reused: past ``max_declared`` marks, old ones go, the new
    owner's mark stays (it is the one a paused process may still come back to read)."""
    marks = keys.queue_declared_dead(QUEUE)
    await store.client.sadd(marks, *[f"gone:{n}:x" for n in range(20)])
    await fetched(store, OWNER, [make_job()])
    await store.client.hset(keys.queue_last_beat(QUEUE), OWNER, "0")

    await run_raw(store, "requeue", script_keys(keys), [options(keys, max_declared=5), 0])

    assert await store.client.scard(marks) == 5
    assert await store.client.sismember(marks, OWNER)


@pytest.mark.parametrize("case", ["alive", "nothing taken", "own list"])
async def test_the_owner_is_not_declared_dead_unless_recovery_took_jobs(
    store: Store, keys: Keys, case: str
) -> None:
    if case != "nothing taken":
        await fetched(store, OWNER, [make_job()])
    if case == "alive":  # as a beat writes it: with a TTL
        await store.client.set(keys.queue_process(QUEUE, OWNER), "alive", ex=30)

    if case == "own list":
        assert await store.requeue(OWNER, QUEUE) == 1
    else:
        await recover(store)

    assert await store.client.exists(keys.queue_declared_dead(QUEUE)) == 0


def options(keys: Keys, queue: str = QUEUE, **changes: Any) -> str:
    """The script's ARGV[1], as Store.recover builds it."""
    return json.dumps({
        "identity": OWNER, "threshold": DEAD_FOR, "now": 0,
        "orphan_prefix": keys.orphanings_prefix(queue), "orphan_ttl": ORPHAN_TTL,
        "max_orphanings": MAX_ORPHANINGS, "limit": REQUEUE_BATCH,
        "wake_channel": keys.wake_channel, "queue": queue, "max_declared": MAX_DECLARED,
        "record_prefix": keys.record_prefix(queue), "finished_ttl": KEEP_STATUS,
        **changes,
    })


def script_keys(keys: Keys, queue: str = QUEUE) -> list[str]:
    return [keys.in_progress(queue, OWNER), keys.queue_process(queue, OWNER),
            keys.queue_last_beat(queue), keys.repeat_orphans(queue), keys.queue(queue),
            keys.queue_declared_dead(queue)]


@pytest.mark.parametrize(("beat_age", "caller_skew", "reply"), [
    (5, 86_400, [-1, 0, 0]),         # recent by Redis TIME: alive, whatever the caller thinks
    (3_600, -86_400, [1, 1, 0, 0]),  # stale by Redis TIME: dead, whatever the caller thinks
])
async def test_liveness_is_judged_by_redis_time(
    store: Store, keys: Keys, beat_age: int, caller_skew: int, reply: list[int]
) -> None:
    await fetched(store, OWNER, [make_job()])
    now = await redis_now(store)
    await store.client.hset(keys.queue_last_beat(QUEUE), OWNER, repr(now - beat_age))

    result = await run_raw(store, "requeue", script_keys(keys),
                           [options(keys, now=now + caller_skew), 0])

    assert result == reply


async def test_each_recovery_bumps_the_orphan_counter_with_a_ttl(
    store: Store, keys: Keys
) -> None:
    [job] = await fetched(store, OWNER, [make_job()])

    await recover(store)

    assert await orphanings(store, keys, job) == b"1"
    ttl = await store.client.ttl(keys.orphanings(QUEUE, jid_of(job)))
    assert ORPHAN_TTL - 60 < ttl <= ORPHAN_TTL
    again = await store.client.rpop(keys.queue(QUEUE))
    assert isinstance(again, bytes)
    await fetched(store, OWNER, [again])
    await recover(store)
    assert await orphanings(store, keys, job) == b"2"
    assert await items(store, keys.queue(QUEUE)) == [job]


async def test_past_max_orphanings_a_job_is_parked_not_requeued(
    store: Store, keys: Keys
) -> None:
    # A job that kills its own process must not come back after every crash.
    repeat, first_time = await fetched(store, OWNER, [make_job(), make_job()])
    await store.client.set(keys.orphanings(QUEUE, jid_of(repeat)), MAX_ORPHANINGS)

    assert await recover(store) == Requeued(moved=1, parked=1)

    assert await items(store, keys.repeat_orphans(QUEUE)) == [repeat]
    assert await items(store, keys.queue(QUEUE)) == [first_time]
    assert await store.client.exists(keys.in_progress(QUEUE, OWNER)) == 0
    assert await orphanings(store, keys, repeat) == b"4"


async def test_max_orphanings_zero_parks_a_job_on_its_first_orphaning(
    store: Store, keys: Keys
) -> None:
    [job] = await fetched(store, OWNER, [make_job()])

    assert await recover(store, max_orphanings=0) == Requeued(moved=0, parked=1)

    assert await items(store, keys.repeat_orphans(QUEUE)) == [job]
    assert await store.client.exists(keys.queue(QUEUE)) == 0


@pytest.mark.parametrize("planted", ["text", "hash"])
async def test_an_orphan_counter_that_is_not_a_number_starts_again(
    store: Store, keys: Keys, planted: str
) -> None:
    [job] = await fetched(store, OWNER, [make_job()])
    counter = keys.orphanings(QUEUE, jid_of(job))
    if planted == "text":
        await store.client.set(counter, "many")
    else:
        await plant_wrong_type(store, counter)

    assert await recover(store) == Requeued(moved=1)

    assert await items(store, keys.queue(QUEUE)) == [job]
    assert await orphanings(store, keys, job) == b"1"


@pytest.mark.parametrize("dead_for", [None, DEAD_FOR])
async def test_more_than_one_batch_is_all_requeued_in_order(
    store: Store, keys: Keys, dead_for: float | None
) -> None:
    jobs = [make_job(n=n) for n in range(2_500)]
    await fetched(store, OWNER, jobs)

    if dead_for is None:
        assert await store.requeue(OWNER, QUEUE) == 2_500
    else:
        result = await store.recover(OWNER, QUEUE, dead_for=dead_for,
                                     max_orphanings=MAX_ORPHANINGS)
        assert result is not None
        assert (result.moved, result.parked) == (2_500, 0)

    assert await store.client.exists(keys.in_progress(QUEUE, OWNER)) == 0
    assert await fetch_all(store, QUEUE) == jobs


async def test_one_call_looks_at_no_more_than_its_limit(store: Store, keys: Keys) -> None:
    # Bounded scripts: one call must not block Redis for long.
    await fetched(store, OWNER, [make_job(n=n) for n in range(2_500)])

    reply = await run_raw(store, "requeue", script_keys(keys), [options(keys, limit=1_000), 0])

    assert reply == [1_000, 1_000, 0, 0]
    assert await store.client.llen(keys.in_progress(QUEUE, OWNER)) == 1_500
    assert await store.client.llen(keys.queue(QUEUE)) == 1_000


@pytest.mark.parametrize("queue", [None, "", 5, ["emails"], "a/b", "sp ace", "{tag}", "é", "a\n",
                                   "q" * 129, "emails"])
async def test_a_job_goes_back_to_its_lists_queue_whatever_its_payload_says(
    store: Store, keys: Keys, queue: object
) -> None:
    # The payload's "queue" field is not read: an invalid name, or a valid one naming
    # another queue (whose key is in another slot), changes nothing.
    job = make_job(queue=queue)
    await plant(store, keys, job, queue="fallback")

    assert await recover(store, "fallback") == Requeued(moved=1)

    assert await items(store, keys.queue("fallback")) == [job]
    assert await store.client.exists(keys.in_progress("fallback", OWNER)) == 0
    assert await store.client.exists(keys.queue("emails")) == 0


async def test_the_script_returns_every_job_to_its_fifth_key(store: Store, keys: Keys) -> None:
    # The contract itself: KEYS[5] is where the jobs go, for jobs of any queue field.
    jobs = [make_job("emails"), make_job("reports"), make_job(None)]
    await plant(store, keys, *jobs, queue="fallback")

    reply = await run_raw(store, "requeue", script_keys(keys, "fallback"),
                          [options(keys, "fallback", threshold=-1), 0])

    assert reply == [3, 3, 0, 0]
    assert await fetch_all(store, "fallback") == jobs
    assert await store.client.exists(keys.queue("emails"), keys.queue("reports")) == 0


async def test_a_job_without_a_queue_field_goes_to_its_lists_queue(
    store: Store, keys: Keys
) -> None:
    payload = json.loads(make_job())
    del payload["queue"]
    job = json.dumps(payload).encode()
    await plant(store, keys, job, queue="fallback")

    assert await store.requeue(OWNER, "fallback") == 1

    assert await items(store, keys.queue("fallback")) == [job]


@pytest.mark.parametrize("raw", [
    NOT_UTF8, b"not json {", b"[1, 2]", b'"a string"', b"null", b"[" * 2_000 + b"]" * 2_000,
], ids=["not-utf8", "not-json", "array", "string", "null", "too-deep"])
async def test_a_raw_that_is_not_a_job_goes_to_its_lists_queue_byte_for_byte(
    store: Store, keys: Keys, raw: bytes
) -> None:
    await plant(store, keys, raw, queue="fallback")

    assert await recover(store, "fallback") == Requeued(moved=1)

    assert await items(store, keys.queue("fallback")) == [raw]
    assert await store.client.exists(keys.in_progress("fallback", OWNER)) == 0


async def test_a_queue_of_the_wrong_type_leaves_its_jobs_in_progress(
    store: Store, keys: Keys
) -> None:
    stuck = await fetched(store, OWNER, [make_job("broken"), make_job("broken")],
                          queue="broken")
    [fine] = await fetched(store, OWNER, [make_job("emails")], queue="emails")
    await plant_wrong_type(store, keys.queue("broken"))

    assert await recover(store, "broken") == Requeued(moved=0)
    assert await recover(store, "emails") == Requeued(moved=1)

    assert sorted(await items(store, keys.in_progress("broken", OWNER))) == sorted(stuck)
    assert await items(store, keys.queue("emails")) == [fine]
    assert await still_planted(store, keys.queue("broken"))
    for raw in stuck:
        assert await orphanings(store, keys, raw, "broken") is None, "counted only once written"
    assert await store.client.exists(keys.queue_declared_dead("broken")) == 0, "took nothing"
    # Looked at again on the next pass, still not lost.
    assert await recover(store, "broken") == Requeued(moved=0)
    assert sorted(await items(store, keys.in_progress("broken", OWNER))) == sorted(stuck)


async def test_a_repeat_orphans_list_of_the_wrong_type_leaves_the_job_in_progress(
    store: Store, keys: Keys
) -> None:
    [repeat] = await fetched(store, OWNER, [make_job()])
    await store.client.set(keys.orphanings(QUEUE, jid_of(repeat)), MAX_ORPHANINGS)
    await plant_wrong_type(store, keys.repeat_orphans(QUEUE))

    assert await recover(store) == Requeued(moved=0)

    assert await items(store, keys.in_progress(QUEUE, OWNER)) == [repeat]
    assert await orphanings(store, keys, repeat) == str(MAX_ORPHANINGS).encode()
