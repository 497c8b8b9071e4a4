"""A failing job is retried as many times as it says, then filed in dead with its error."""

from __future__ import annotations

import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.worker.e2e.conftest import (
    StartWorker,
    counter,
    in_progress,
    ran,
    wait_ready,
    wait_while_alive,
    zset_entries,
)
from tests.worker.e2e.jobsapp import Jobs


async def test_retry_2_runs_three_times_then_dead(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    worker = start_worker()
    await wait_ready(r, namespace, worker)
    jid = await jobs.fail.options(retry=2).enqueue("twice")

    await wait_while_alive(worker, lambda: _dead_count(r, namespace, 1), timeout=10)
    await worker.stop()  # also flushes the stats it counted

    assert await ran(r, namespace) == ["twice"] * 3  # the run and its 2 retries
    (entry,) = await zset_entries(r, Keys(namespace).dead("default"))
    assert entry["jid"] == jid
    assert entry["class"] == "fail"
    assert entry["args"] == ["twice"]
    assert entry["error_class"] == "RuntimeError"
    assert entry["error_message"] == "boom twice"
    assert entry["retry_count"] == 2  # Sidekiq's count: 0 after the first failure
    assert await r.zcard(Keys(namespace).retry("default")) == 0
    assert await r.llen(Keys(namespace).queue("default")) == 0
    assert await in_progress(r, namespace) == []
    assert await counter(r, Keys(namespace).stats_failed) == 3


async def test_retry_false_goes_to_dead_after_one_run(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    worker = start_worker()
    await wait_ready(r, namespace, worker)
    jid = await jobs.fail.options(retry=False).enqueue("once")

    await wait_while_alive(worker, lambda: _dead_count(r, namespace, 1), timeout=10)
    await worker.stop()

    assert await ran(r, namespace) == ["once"]
    (entry,) = await zset_entries(r, Keys(namespace).dead("default"))
    assert entry["jid"] == jid
    assert entry["error_class"] == "RuntimeError"
    assert entry["error_message"] == "boom once"
    assert entry["retry_count"] == 0
    assert entry["retry"] is False
    assert await r.zcard(Keys(namespace).retry("default")) == 0
    assert await in_progress(r, namespace) == []
    assert await counter(r, Keys(namespace).stats_failed) == 1


async def _dead_count(r: redis.asyncio.Redis, namespace: str, n: int) -> bool:
    return int(await r.zcard(Keys(namespace).dead("default"))) >= n

