"""schedule.lua: add jobs to a queue's schedule zset, due at a time or after a delay."""

from __future__ import annotations

import pytest
import redis

from cogworker_async.jobs.status import LIVE_TTL
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import (
    NOT_UTF8,
    jid_of,
    make_job,
    plant_wrong_type,
    record_ttl,
    redis_now,
    run_raw,
    scored,
    still_planted,
)

QUEUE = "default"


async def test_at_files_each_job_at_that_epoch_time(store: Store, keys: Keys) -> None:
    jobs = [make_job("emails"), make_job("emails")]

    added = await store.schedule("emails", jobs, at=2_000_000_000.5)

    assert added == 2
    assert sorted(await scored(store, keys.schedule("emails"))) == sorted(
        (job, 2_000_000_000.5) for job in jobs
    )
    assert await store.client.llen(keys.queue("emails")) == 0


async def test_delay_counts_from_redis_time(store: Store, keys: Keys) -> None:
    job = make_job()

    before = await redis_now(store)
    assert await store.schedule(QUEUE, [job], delay=30.0) == 1
    after = await redis_now(store)

    [(member, score)] = await scored(store, keys.schedule(QUEUE))
    assert member == job
    assert before + 30.0 <= score <= after + 30.0


async def test_the_callers_clock_is_only_a_fallback(store: Store, keys: Keys) -> None:
    # A caller whose clock is a day behind still schedules by Redis' clock.
    job = make_job()
    now = await redis_now(store)

    args = ["in", "10", repr(now - 86_400), "0", "0", keys.record_prefix(QUEUE), LIVE_TTL,
            "0", QUEUE, "send_email", repr(now - 86_400), "", jid_of(job), job]
    await run_raw(store, "schedule", [keys.schedule(QUEUE)], args)

    [(_, score)] = await scored(store, keys.schedule(QUEUE))
    assert score == pytest.approx(now + 10, abs=5)
    # The record's TTL counts from the due time by the same clock: not a day short.
    ttl = await record_ttl(store.client, keys, QUEUE, jid_of(job))
    assert ttl == pytest.approx(LIVE_TTL + 10, abs=5)


async def test_scheduling_the_same_job_twice_adds_it_once(store: Store, keys: Keys) -> None:
    job = make_job()

    assert await store.schedule(QUEUE, [job], at=2_000_000_000.0) == 1
    assert await store.schedule(QUEUE, [job], at=2_000_000_000.0) == 0

    assert await scored(store, keys.schedule(QUEUE)) == [(job, 2_000_000_000.0)]


async def test_a_job_that_is_not_utf8_is_stored_byte_for_byte(store: Store, keys: Keys) -> None:
    await store.schedule(QUEUE, [NOT_UTF8], at=2_000_000_000.0)

    assert await scored(store, keys.schedule(QUEUE)) == [(NOT_UTF8, 2_000_000_000.0)]


async def test_a_schedule_key_of_the_wrong_type_refuses_the_jobs(
    store: Store, keys: Keys
) -> None:
    await plant_wrong_type(store, keys.schedule(QUEUE))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.schedule(QUEUE, [make_job()], delay=5.0)

    assert await still_planted(store, keys.schedule(QUEUE))
