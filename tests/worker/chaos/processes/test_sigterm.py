"""Scenario 9 (K9) — SIGTERM (a deploy) while long jobs run.

A worker runs long jobs, a short one, and two ``retry=False`` jobs that fail: one before
the signal, one during the grace period. On SIGTERM it stops fetching, gives running
jobs ``shutdown_timeout`` seconds, cancels the rest and hands them back.

Must hold: it exits 0 within ``shutdown_timeout + 3 s``; every unfinished long job is
back on its queue (nothing left in progress, nothing in retry); the short job finished
and is not requeued; both failed ``retry=False`` jobs are in dead and are not run again
after a restart, while the long jobs are (each exactly once more).
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from typing import Final, cast

import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.conftest import (
    EXIT_SLACK,
    FULL,
    Fleet,
    in_progress_lists,
    marks,
    report,
    tags_of,
    wait_ready,
)

pytestmark = marks(short_timeout=60, full_timeout=90)

LONG_JOBS: Final = 20 if FULL else 5
CONCURRENCY: Final = LONG_JOBS + 5
SHUTDOWN_TIMEOUT: Final = 5.0 if FULL else 2.0
LONG: Final = 60.0
FAIL_LATE: Final = SHUTDOWN_TIMEOUT / 2
"""The second failing job fails this long after it starts: within the grace period."""


async def _all_started(r: redis.asyncio.Redis, namespace: str, tags: list[str],
                       times: int = 1) -> bool:
    starts = await chaosapp.counts(r, chaosapp.started_key(namespace))
    return all(starts[tag] >= times for tag in tags)


async def _dead_tags(r: redis.asyncio.Redis, namespace: str) -> list[str]:
    return sorted(str(json.loads(m)["args"][0])
                  for m in cast("list[bytes]",
                                await r.zrange(Keys(namespace).dead("default"), 0, -1)))


async def _any_dead(r: redis.asyncio.Redis, namespace: str) -> bool:
    return bool(await _dead_tags(r, namespace))


async def _listed(r: redis.asyncio.Redis, key: str, entry: str) -> bool:
    return await r.lpos(key, entry) is not None


async def test_sigterm_requeues_unfinished_jobs_and_never_reruns_a_failed_one(
    r: redis.asyncio.Redis, jobs: chaosapp.Jobs, fleet: Fleet, namespace: str
) -> None:
    settings = {"concurrency": CONCURRENCY, "shutdown_timeout": SHUTDOWN_TIMEOUT}
    worker = fleet.start(**settings)
    await wait_ready(r, namespace, [worker])
    await jobs.fail.enqueue("fails-early", 0.0)
    await wait_until(lambda: _any_dead(r, namespace), timeout=10)
    long_tags = [f"long-{i}" for i in range(LONG_JOBS)]
    await jobs.work.enqueue_many([((tag, LONG), {}) for tag in long_tags])
    await jobs.work.enqueue("short", FAIL_LATE)
    await jobs.fail.enqueue("fails-late", FAIL_LATE)
    await wait_until(lambda: _all_started(r, namespace, [*long_tags, "short", "fails-late"]),
                     timeout=10)

    began = time.monotonic()
    worker.signal(signal.SIGTERM)
    status = await worker.wait_exit(SHUTDOWN_TIMEOUT + EXIT_SLACK)
    exit_s = time.monotonic() - began
    queued = tags_of(await r.lrange(Keys(namespace).queue("default"), 0, -1))
    assert status == 0, worker.log()
    assert sorted(queued) == sorted(long_tags)
    assert await in_progress_lists(r, namespace) == {}
    assert await r.zcard(Keys(namespace).retry("default")) == 0
    assert await _dead_tags(r, namespace) == ["fails-early", "fails-late"]

    restarted = fleet.start(**settings)
    await wait_ready(r, namespace, [restarted])
    await jobs.work.enqueue("marker", 0.0)  # behind anything requeued: fetched last
    await wait_until(lambda: _all_started(r, namespace, long_tags, times=2), timeout=10)
    finished = chaosapp.finished_key(namespace)
    await wait_until(lambda: _all_started(r, namespace, ["marker"]), timeout=10)
    await wait_until(lambda: _listed(r, finished, f"marker {restarted.pid}"), timeout=10)
    starts = await chaosapp.counts(r, chaosapp.started_key(namespace))
    finishes = Counter(tag for tag, _ in await chaosapp.runs(r, finished))
    report("sigterm", long_jobs=LONG_JOBS, shutdown_timeout=SHUTDOWN_TIMEOUT,
           exit_s=round(exit_s, 2), requeued=len(queued),
           reruns_after_restart=sum(starts[tag] - 1 for tag in long_tags),
           failed_reruns=starts["fails-early"] + starts["fails-late"] - 2)
    assert exit_s <= SHUTDOWN_TIMEOUT + EXIT_SLACK
    assert all(starts[tag] == 2 for tag in long_tags)
    assert (starts["fails-early"], starts["fails-late"], starts["short"]) == (1, 1, 1)
    assert (finishes["fails-late"], finishes["short"]) == (1, 1)
    assert await _dead_tags(r, namespace) == ["fails-early", "fails-late"]
