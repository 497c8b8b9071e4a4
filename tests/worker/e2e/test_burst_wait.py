"""``run --burst-wait S``: a burst that also waits for what is due within S seconds (arq's
burst waits for its deferred jobs), then exits 0; a job due later is left scheduled. A
plain ``--burst`` leaves a job that is not due yet. Every job is enqueued before the
worker starts: what each run must do does not hang on how fast the host is."""

from __future__ import annotations

import redis.asyncio

from cogworker_async.admin import Inspector
from tests.worker.e2e import jobsapp
from tests.worker.e2e.conftest import StartWorker, ran

SOON = 3.0
"""Seconds to a job a plain ``--burst`` (two idle looks, ~2 s) would leave behind, if it
started at once: ``--burst-wait 10`` must run it."""
NOT_DUE = 30.0
"""Seconds to a job a plain ``--burst`` must leave: far enough that no slow start makes
it due."""


async def test_burst_wait_runs_what_is_due_soon_and_leaves_the_rest(
    start_worker: StartWorker, jobs: jobsapp.Jobs, r: redis.asyncio.Redis, namespace: str,
) -> None:
    await jobs.record.enqueue("now")
    await jobs.record.enqueue_in(SOON, "soon")
    later = await jobs.record.enqueue_in(3600, "later")
    worker = start_worker("--burst-wait", "10")

    assert await worker.wait_exit(60) == 0, worker.log()
    assert await ran(r, namespace) == ["now", "soon"]
    assert later is not None
    assert (await jobs.app.status(later)).state == "scheduled"
    assert (await Inspector(jobs.app).scheduled.size()) == 1
    assert "burst: nothing left to do (2 jobs run)" in worker.log()


async def test_plain_burst_leaves_what_is_not_due(
    start_worker: StartWorker, jobs: jobsapp.Jobs, r: redis.asyncio.Redis, namespace: str,
) -> None:
    await jobs.record.enqueue("now")
    waiting = await jobs.record.enqueue_in(NOT_DUE, "not due")
    worker = start_worker("--burst")

    assert await worker.wait_exit(60) == 0, worker.log()
    assert await ran(r, namespace) == ["now"]
    assert waiting is not None
    assert (await jobs.app.status(waiting)).state == "scheduled"
