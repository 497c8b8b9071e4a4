"""``run --burst-wait S``: a burst that also waits for what is due within S seconds (arq's
burst waits for its deferred jobs), then exits 0; a job due later is left scheduled."""

from __future__ import annotations

import redis.asyncio

from cogworker_async.admin import Inspector
from tests.waiting import wait_until
from tests.worker.e2e import jobsapp
from tests.worker.e2e.conftest import StartWorker, ran

SOON = 3.0
"""Seconds from the first run to a job a plain ``--burst`` (two idle looks, ~2 s) would
leave behind: ``--burst-wait`` must still run it."""


async def test_burst_wait_runs_what_is_due_soon_and_leaves_the_rest(
    start_worker: StartWorker, jobs: jobsapp.Jobs, r: redis.asyncio.Redis, namespace: str,
) -> None:
    await jobs.record.enqueue("now")
    later = await jobs.record.enqueue_in(3600, "later")
    worker = start_worker("--burst-wait", "10")

    async def first_ran() -> bool:
        return await ran(r, namespace) == ["now"]
    await wait_until(first_ran, timeout=30)
    await jobs.record.enqueue_in(SOON, "soon")

    assert await worker.wait_exit(60) == 0, worker.log()
    assert await ran(r, namespace) == ["now", "soon"]
    assert later is not None
    assert (await jobs.app.status(later)).state == "scheduled"
    assert (await Inspector(jobs.app).scheduled.size()) == 1
    assert "burst: nothing left to do (2 jobs run)" in worker.log()
