"""_dead.lua (trim_dead): every script that files into a queue's dead set keeps it within
``dead_max_jobs`` and ``dead_max_age``, oldest first; other destinations, and other
queues' dead sets, are untouched."""

from __future__ import annotations

import json

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import DeadLimits, Store
from tests.redis.lua.helpers import fetched, items, make_job, redis_now, scored

IDENTITY = "host:1:abc"
QUEUE = "default"


def entry_of(raw: bytes) -> bytes:
    payload = json.loads(raw)
    payload.update(error_class="ValueError", error_message="boom", retry_count=0)
    return json.dumps(payload).encode()


async def plant_dead(store: Store, keys: Keys, scores: list[float],
                     queue: str = QUEUE) -> list[bytes]:
    planted = [make_job(queue) for _ in scores]
    await store.client.zadd(keys.dead(queue), dict(zip(planted, scores, strict=True)))
    return planted


def bounded(store: Store, max_jobs: int, max_age: float = 3600.0) -> Store:
    """The same store, with other dead limits."""
    store.dead_limits = DeadLimits(max_jobs, max_age)
    return store


async def test_filing_in_dead_drops_the_oldest_beyond_max_jobs(store: Store, keys: Keys) -> None:
    now = await redis_now(store)
    old = await plant_dead(store, keys, [now - 30, now - 20, now - 10])
    [raw] = await fetched(store, IDENTITY, [make_job()])

    assert await bounded(store, 3).file_failure(IDENTITY, QUEUE, raw, "dead", entry_of(raw), 0.0)

    kept = [member for member, _ in await scored(store, keys.dead(QUEUE))]
    assert kept == [old[1], old[2], entry_of(raw)]
    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == []


async def test_filing_in_dead_drops_entries_older_than_max_age(store: Store, keys: Keys) -> None:
    now = await redis_now(store)
    stale, fresh = await plant_dead(store, keys, [now - 7200, now - 60])
    [raw] = await fetched(store, IDENTITY, [make_job()])

    await bounded(store, 100, max_age=3600).file_failure(IDENTITY, QUEUE, raw, "dead",
                                                         entry_of(raw), 0)

    kept = [member for member, _ in await scored(store, keys.dead(QUEUE))]
    assert stale not in kept
    assert kept == [fresh, entry_of(raw)]


async def test_filing_in_retry_trims_nothing(store: Store, keys: Keys) -> None:
    now = await redis_now(store)
    old = await plant_dead(store, keys, [now - 99_999, now - 2, now - 1])
    await store.client.zadd(keys.retry(QUEUE), {make_job(): now - 99_999})
    [raw] = await fetched(store, IDENTITY, [make_job()])

    await bounded(store, 1, max_age=10).file_failure(IDENTITY, QUEUE, raw, "retry",
                                                     entry_of(raw), 5)

    assert [m for m, _ in await scored(store, keys.dead(QUEUE))] == old
    assert await store.client.zcard(keys.retry(QUEUE)) == 2


async def test_another_queues_dead_set_is_not_trimmed(store: Store, keys: Keys) -> None:
    # One dead set per queue: the bound applies to the set filed into.
    now = await redis_now(store)
    others = await plant_dead(store, keys, [now - 99_999, now - 3, now - 2, now - 1], "reports")
    [raw] = await fetched(store, IDENTITY, [make_job()])

    assert await bounded(store, 1, max_age=10).file_failure(IDENTITY, QUEUE, raw, "dead",
                                                            entry_of(raw), 0.0)

    assert [m for m, _ in await scored(store, keys.dead(QUEUE))] == [entry_of(raw)]
    assert [m for m, _ in await scored(store, keys.dead("reports"))] == others


async def test_every_path_into_dead_is_bounded(store: Store, keys: Keys) -> None:
    """Unsettled records, a burial, an admin kill and an unparseable scheduled entry."""
    limited = bounded(store, 2)
    now = await redis_now(store)
    await plant_dead(store, keys, [now - 50, now - 40])

    # an admin kill (retry -> dead)
    member = make_job()
    await store.client.zadd(keys.retry(QUEUE), {member: now})
    assert await limited.move_member(QUEUE, "retry", "dead", member, entry_of(member))
    assert await store.client.zcard(keys.dead(QUEUE)) == 2

    # an entry filed straight into dead (the poller's unparseable scheduled job)
    await limited.file_entry(QUEUE, "dead", entry_of(make_job()), 0.0)
    assert await store.client.zcard(keys.dead(QUEUE)) == 2

    # a handed-over failure filed by another process
    record = b'{"set":"dead"}'
    await store.client.rpush(keys.unsettled(QUEUE), record)
    assert await limited.file_unsettled(QUEUE, record, "dead", entry_of(make_job()), 0.0)
    assert await store.client.zcard(keys.dead(QUEUE)) == 2

    # a repeat orphan buried as ProcessDied
    parked = make_job()
    await store.client.rpush(keys.repeat_orphans(QUEUE), parked)
    assert await limited.bury_orphan(QUEUE, parked, entry_of(parked), None)
    dead = [m for m, _ in await scored(store, keys.dead(QUEUE))]
    assert dead[-1] == entry_of(parked)
    assert len(dead) == 2


def test_the_default_bound_is_the_settings_default() -> None:
    assert DeadLimits() == DeadLimits(10_000, 180 * 24 * 3600.0)
