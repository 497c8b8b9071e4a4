"""add_stats.lua: a worker's stats flush — totals, today's counts, run metrics — applied
at most once per (process, flush number). A flush whose reply was lost is sent again
under its number; counting it twice would inflate every total and every graph (the
dashboard's processed total once did, after a flush cancelled at shutdown)."""

from __future__ import annotations

import time

from cogworker_async.observe.run_metrics import RETENTION, parse
from cogworker_async.redis.store import FLUSH_NUMBER_TTL, StatsFlush, Store

IDENTITY = "host:1:abc"
MINUTE = 29_000_000


def flush(number: int, processed: int = 3, failed: int = 1) -> StatsFlush:
    return StatsFlush(number, processed, failed,
                      {MINUTE: {"send|runs": 3, "send|failed": 1, "send|us": 12000, "send|h2": 3},
                       MINUTE + 1: {"other|runs": 1}})


async def totals(store: Store) -> tuple[int, int]:
    keys = store.keys
    return (int(await store.client.get(keys.stats_processed) or 0),
            int(await store.client.get(keys.stats_failed) or 0))


async def test_a_flush_adds_totals_days_and_run_metrics_with_their_ttls(store: Store) -> None:
    assert await store.flush_stats(IDENTITY, flush(1))
    keys = store.keys
    assert await totals(store) == (3, 1)
    day = time.strftime("%Y-%m-%d", time.gmtime())
    assert int(await store.client.get(keys.stats_processed_on(day))) == 3
    assert await store.client.ttl(keys.stats_failed_on(day)) > 0
    [first, second] = await store.run_metrics([MINUTE, MINUTE + 1])
    entry = parse(first)["send"]
    assert (entry.runs, entry.failed, entry.ms, entry.histogram[2]) == (3, 1, 12, 3)
    assert parse(second)["other"].runs == 1
    assert 0 < await store.client.ttl(keys.run_metrics(MINUTE)) <= RETENTION
    assert 0 < await store.client.ttl(keys.stats_flushed(IDENTITY)) <= FLUSH_NUMBER_TTL


async def test_the_same_flush_sent_again_counts_once(store: Store) -> None:
    assert await store.flush_stats(IDENTITY, flush(1))
    assert not await store.flush_stats(IDENTITY, flush(1))  # its reply was lost: again
    assert await totals(store) == (3, 1)
    [first, _] = await store.run_metrics([MINUTE, MINUTE + 1])
    assert parse(first)["send"].runs == 3
    assert await store.flush_stats(IDENTITY, flush(2))  # the next one counts
    assert await totals(store) == (6, 2)
    assert not await store.flush_stats(IDENTITY, flush(1))  # an older one never again
    assert await totals(store) == (6, 2)


async def test_each_process_numbers_its_own_flushes(store: Store) -> None:
    assert await store.flush_stats(IDENTITY, flush(1))
    assert await store.flush_stats("host:2:def", flush(1))
    assert await totals(store) == (6, 2)


async def test_a_flush_without_runs_or_failures_touches_only_what_it_has(store: Store) -> None:
    assert await store.flush_stats(IDENTITY, StatsFlush(1, 5, 0, {}))
    assert await totals(store) == (5, 0)
    day = time.strftime("%Y-%m-%d", time.gmtime())
    assert await store.client.exists(store.keys.stats_failed_on(day)) == 0


async def test_a_damaged_flush_number_does_not_stop_the_flushes(store: Store) -> None:
    await store.client.hset(store.keys.stats_flushed(IDENTITY), "x", "y")  # wrong type
    assert await store.flush_stats(IDENTITY, flush(1))
    assert await totals(store) == (3, 1)
    assert not await store.flush_stats(IDENTITY, flush(1))


async def test_a_damaged_counter_is_skipped_and_the_rest_of_the_flush_applied(
    store: Store
) -> None:
    day = time.strftime("%Y-%m-%d", time.gmtime())
    await store.client.hset(store.keys.stats_processed_on(day), "x", "y")  # wrong type
    assert await store.flush_stats(IDENTITY, flush(1))
    assert await totals(store) == (3, 1)  # the failed total after the damaged key too
    [first, _] = await store.run_metrics([MINUTE, MINUTE + 1])
    assert parse(first)["send"].runs == 3
