"""Scheduled jobs run once their time has come, never before."""

from __future__ import annotations

import time

import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.worker.e2e.conftest import StartWorker, in_progress, ran, wait_ready, wait_while_alive
from tests.worker.e2e.jobsapp import Jobs, ran_at_key

DELAY = 2.0
CLOCK_SLACK = 0.01
"""Seconds of rounding between time.time() here and Redis TIME (same host clock)."""
LATE_BOUND = 3.0
"""Seconds after its due time by which a scheduled job must have run (poll interval 0.05 s)."""


async def test_enqueue_in_and_enqueue_at_run_after_their_time_not_before(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    worker = start_worker()
    await wait_ready(r, namespace, worker)

    enqueued = time.time()
    await jobs.record.enqueue_in(DELAY, "in")
    at = time.time() + DELAY
    await jobs.record.enqueue_at(at, "at")
    await jobs.record.enqueue("now")  # the worker is working meanwhile
    assert await r.zcard(Keys(namespace).schedule("default")) == 2

    await wait_while_alive(worker, lambda: _ran_count(r, namespace, 3),
                           timeout=DELAY + LATE_BOUND)
    ran_at = {k.decode(): float(v) for k, v in (await r.hgetall(ran_at_key(namespace))).items()}
    assert ran_at["now"] < enqueued + DELAY  # immediate jobs don't wait for the scheduled
    assert ran_at["in"] >= enqueued + DELAY - CLOCK_SLACK
    assert ran_at["at"] >= at - CLOCK_SLACK
    assert ran_at["in"] <= enqueued + DELAY + LATE_BOUND

    await worker.stop()
    assert sorted(await ran(r, namespace)) == ["at", "in", "now"]  # each once
    assert await r.zcard(Keys(namespace).schedule("default")) == 0
    assert await r.llen(Keys(namespace).queue("default")) == 0
    assert await in_progress(r, namespace) == []


async def _ran_count(r: redis.asyncio.Redis, namespace: str, n: int) -> bool:
    return len(await ran(r, namespace)) >= n
