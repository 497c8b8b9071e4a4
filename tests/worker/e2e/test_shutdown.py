"""SIGTERM/SIGINT: running jobs get ``shutdown_timeout``, then go back to their queue.

Nothing is lost and nothing lands in dead: a job cut short never finished, so it goes
back to its queue, to run again. That holds for a plain function too, whose thread cannot
be cancelled: the worker does not wait for it. A second signal stops at once.
"""

from __future__ import annotations

import json
import signal
import time

import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.waiting import wait_until
from tests.worker.e2e.conftest import (
    READY_TIMEOUT,
    StartWorker,
    WorkerProcess,
    in_progress,
    ran,
    started,
    wait_ready,
    wait_while_alive,
)
from tests.worker.e2e.jobsapp import Jobs

pytestmark = pytest.mark.slow

LONG = 30.0
"""Seconds a long job sleeps: far longer than any test waits. A plain function's thread
cannot be cancelled: the worker must not wait for it either."""
EXIT_SLACK = 3.0
"""Seconds a stopping worker may take beyond its shutdown_timeout (hand-over, exit)."""


async def _start_long_jobs(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, worker: WorkerProcess, n: int
) -> list[str]:
    """``n`` long async jobs and one long plain (threaded) job, all running."""
    await wait_ready(r, namespace, worker)
    jids = [await jobs.sleepy.enqueue(f"long-{i}", LONG) for i in range(n)]
    jids.append(await jobs.sleepy_sync.enqueue("long-sync", LONG))

    async def all_started() -> bool:
        return len(await started(r, namespace)) >= n + 1

    await wait_while_alive(worker, all_started, timeout=10)
    return jids


async def _given_back(r: redis.asyncio.Redis, namespace: str) -> list[str]:
    """jids on the default queue."""
    queue = Keys(namespace).queue("default")
    return [json.loads(raw)["jid"] for raw in await r.lrange(queue, 0, -1)]


async def _assert_nothing_lost(r: redis.asyncio.Redis, namespace: str, jids: list[str]) -> None:
    assert sorted(await _given_back(r, namespace)) == sorted(jids)
    assert await in_progress(r, namespace) == []
    assert await r.zcard(Keys(namespace).dead("default")) == 0
    assert await r.zcard(Keys(namespace).retry("default")) == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_stops_gracefully_and_gives_back_unfinished_jobs(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker,
    signum: signal.Signals,
) -> None:
    shutdown_timeout = 1.0
    worker = start_worker(shutdown_timeout=shutdown_timeout)
    jids = await _start_long_jobs(jobs, r, namespace, worker, 3)
    await jobs.sleepy.enqueue("short", 0.2)  # finishes within the grace period
    await wait_while_alive(worker, lambda: _started(r, namespace, "short"), timeout=5)

    began = time.monotonic()
    worker.signal(signum)
    status = await worker.wait_exit(timeout=shutdown_timeout + EXIT_SLACK)
    took = time.monotonic() - began

    assert status == 0, worker.log()
    assert took >= shutdown_timeout * 0.9  # it did wait for the running jobs
    assert await ran(r, namespace) == ["short"]  # a job that could finish did, once
    await _assert_nothing_lost(r, namespace, jids)


async def test_second_sigterm_stops_at_once(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    shutdown_timeout = 30.0
    worker = start_worker(shutdown_timeout=shutdown_timeout)
    jids = await _start_long_jobs(jobs, r, namespace, worker, 2)

    worker.signal(signal.SIGTERM)
    # Signals of one kind are not queued: wait until the first was handled.
    await wait_until(lambda: "SIGTERM: stopping" in worker.log(), timeout=5)
    assert worker.alive()  # in the graceful wait
    began = time.monotonic()
    worker.signal(signal.SIGTERM)
    status = await worker.wait_exit(timeout=EXIT_SLACK)

    assert time.monotonic() - began < EXIT_SLACK
    assert status == 1, worker.log()  # cli.py: a hard stop exits 1
    assert await ran(r, namespace) == []
    await _assert_nothing_lost(r, namespace, jids)
    # The log says why the jobs were cut short, and where they went: not "after 30s",
    # which a second signal one second in would make a false line.
    assert (f"a second signal, or hard_stop()): cancelling {len(jids)} job(s) now; they "
            "are given back to their queue") in worker.log()
    assert "still running after" not in worker.log()


async def test_sigterm_on_an_idle_worker_exits_at_once(
    r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    worker = start_worker(shutdown_timeout=30.0)
    await wait_ready(r, namespace, worker)
    took = await worker.stop(timeout=EXIT_SLACK)  # asserts exit status 0
    assert took < EXIT_SLACK  # nothing to wait for: the grace period is not sat out
    assert await in_progress(r, namespace) == []


async def _started(r: redis.asyncio.Redis, namespace: str, tag: str) -> bool:
    return tag in await started(r, namespace)


async def test_sigterm_right_after_the_first_fetch_is_still_graceful(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    """The signal handlers must be in place before the worker fetches anything."""
    tags = [f"early-{i}" for i in range(200)]
    await jobs.record.enqueue_many([((tag,), {}) for tag in tags])
    queue = Keys(namespace).queue("default")
    worker = start_worker()

    async def fetching() -> bool:
        return int(await r.llen(queue)) < len(tags)

    await wait_until(fetching, timeout=READY_TIMEOUT, every=0.001)
    worker.signal(signal.SIGTERM)
    status = await worker.wait_exit(timeout=2.0 + EXIT_SLACK)

    assert status == 0, worker.log()
    done = await ran(r, namespace)
    left = [json.loads(raw)["args"][0] for raw in await r.lrange(queue, 0, -1)]
    assert sorted(done + left) == sorted(tags)  # each ran once or waits, none both
    assert await in_progress(r, namespace) == []
    assert await r.zcard(Keys(namespace).dead("default")) == 0
