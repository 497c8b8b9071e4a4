"""1,000 jobs through a real worker process: each runs exactly once, nothing is left over."""

from __future__ import annotations

from collections import Counter

import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.worker.e2e.conftest import (
    StartWorker,
    counter,
    in_progress,
    ran,
    wait_ready,
    wait_while_alive,
)
from tests.worker.e2e.jobsapp import Jobs, ran_key

JOBS = 1000


async def test_a_thousand_jobs_each_run_exactly_once(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    tags = [f"job-{i}" for i in range(JOBS)]
    jids = await jobs.record.enqueue_many([((tag,), {}) for tag in tags])
    assert len(set(jids)) == JOBS
    assert await r.llen(Keys(namespace).queue("default")) == JOBS

    worker = start_worker("--concurrency", "20")
    await wait_ready(r, namespace, worker)
    await wait_while_alive(worker, lambda: _count_is(r, ran_key(namespace), JOBS), timeout=30)
    # A clean stop flushes the stats and settles nothing more: every count below is final.
    await worker.stop()
    runs = Counter(await ran(r, namespace))
    assert runs == Counter(tags)  # every argument exactly once, nothing else
    assert await r.llen(Keys(namespace).queue("default")) == 0
    assert await in_progress(r, namespace) == []
    assert await r.zcard(Keys(namespace).retry("default")) == 0
    assert await r.zcard(Keys(namespace).dead("default")) == 0
    assert await counter(r, Keys(namespace).stats_processed) == JOBS
    assert await counter(r, Keys(namespace).stats_failed) == 0


async def _count_is(r: redis.asyncio.Redis, key: str, n: int) -> bool:
    return int(await r.llen(key)) >= n

