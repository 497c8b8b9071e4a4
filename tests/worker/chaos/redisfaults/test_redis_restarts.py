"""Scenario 6 (R1): Redis restarted three times under load.

Two worker processes work through a batch of short jobs while their server (AOF on,
``appendfsync always``: nothing acknowledged is lost by Redis itself) is stopped
gracefully and started again three times. The workers reconnect by themselves, their
pending settlements drain (nothing is left on any in-progress list, ``unsettled`` is
empty), every job finishes at least once, and a job runs twice only if it was in
flight at a restart.

6b: Redis down longer than ``orphan_threshold`` (nobody can beat meanwhile), while a
third worker is SIGKILLed: once Redis is back the two live workers must not take each
other for dead (before the fix in ``Recovery.recover_orphans`` 3 runs in 5 re-ran the
in-flight and finished-but-unacked jobs of one of them), and the dead one's jobs are
still recovered.
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.worker.chaos.redisfaults.conftest import (
    FULL,
    SETTINGS,
    StartWorker,
    Witness,
    forgotten,
    in_progress,
    leftovers,
    log_count,
    report,
    size,
    wait_ready,
)
from tests.worker.chaos.redisfaults.faultapp import Jobs
from tests.workerproc import WorkerProcess

pytestmark = pytest.mark.timeout(600 if FULL else 90)

JOBS = size(2000, 10_000)
CONCURRENCY = 10
RESTART_AT = (0.15, 0.4, 0.65)
"""Fractions of the batch finished when each restart begins."""
RESUME_BOUND = 5.0
"""Seconds within which every worker must finish a job again once Redis is back."""
OUTAGE = 1.0
"""Seconds Redis stays down each time: longer than a settle's own retries (so outcomes
go pending and must drain later), shorter than orphan_threshold."""
LONG_OUTAGE = SETTINGS["orphan_threshold"] + 1.0
"""Longer than orphan_threshold: no process could beat meanwhile, so once Redis is back
every stamp is stale — live workers must not take each other for dead."""


async def test_redis_restarted_three_times_under_load(
    servers: Callable[..., ServerProcess], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    run = await _run(servers, start_worker, make_jobs, clients, witness, namespace,
                     jobs=JOBS, restart_at=RESTART_AT, outage=OUTAGE)
    report("6-redis-restarts", **run.figures)
    assert run.lost == []
    # Only a job in flight at a restart may run twice: at most every slot, each time.
    assert run.duplicate_runs <= len(RESTART_AT) * 2 * CONCURRENCY
    run.check_resumed()


async def test_redis_down_longer_than_orphan_threshold(
    servers: Callable[..., ServerProcess], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    """A third worker is SIGKILLed while Redis is down: once Redis is back its jobs are
    recovered (after the survivors' own grace), and only its jobs run twice."""
    run = await _run(servers, start_worker, make_jobs, clients, witness, namespace,
                     jobs=size(1000, 5000), restart_at=(0.3,), outage=LONG_OUTAGE,
                     victim=True)
    declared = sum(log_count(w, "was declared dead") for w in run.workers)
    recovered = sum(log_count(w, "left in progress by dead process") for w in run.workers)
    report("6b-redis-down-longer-than-orphan-threshold", declared_dead=declared,
           recoveries=recovered, **run.figures)
    assert run.lost == []
    assert declared == 0  # the live workers did not take each other for dead
    # The victim's list, once — or not at all when the kill found it holding no job
    # (every job it had fetched settled just before Redis went down): then there is
    # nothing to recover, only a dead identity to forget (checked just below).
    assert recovered <= 1
    # Only the victim's jobs (in flight when it died) ran twice.
    assert run.duplicate_runs <= CONCURRENCY
    assert run.victim_recovered_in is not None
    assert run.victim_recovered_in <= 2 * SETTINGS["orphan_threshold"] + 3.0
    run.check_resumed()


@dataclass
class Run:
    workers: list[WorkerProcess]
    lost: list[str]
    duplicate_runs: int
    restarts: list[dict[str, Any]]
    figures: dict[str, Any]
    victim_recovered_in: float | None = None
    """Seconds from Redis back up to the victim's list recovered and forgotten."""

    def check_resumed(self) -> None:
        for restart in self.restarts:
            for seconds in restart["resumed_in"].values():
                assert seconds is None or seconds <= RESUME_BOUND, self.restarts


async def _run(servers: Callable[..., ServerProcess], start_worker: StartWorker,
               make_jobs: Callable[[str], Jobs],
               clients: Callable[[str], redis.asyncio.Redis], witness: Witness,
               namespace: str, *, jobs: int, restart_at: tuple[float, ...],
               outage: float, victim: bool = False) -> Run:
    """``jobs`` short jobs, 2 workers, a graceful restart of Redis at each fraction of
    ``restart_at`` (down ``outage`` s); returns once everything is settled and the
    workers stopped cleanly. ``victim``: a third worker, SIGKILLed during the first
    outage."""
    server = servers(appendonly=True, extra=["--appendfsync", "always"])
    r, app = clients(server.url), make_jobs(server.url)
    tags = [f"job-{i}" for i in range(jobs)]
    await app.record.enqueue_many([((tag,), {}) for tag in tags])
    workers = [start_worker(server.url, "--concurrency", str(CONCURRENCY)) for _ in range(2)]
    doomed = [start_worker(server.url, "--concurrency", str(CONCURRENCY),
                           identity="fault-6-victim")] if victim else []
    await wait_ready(r, namespace, *workers, *doomed)
    began = time.monotonic()

    restarts = []
    for fraction in restart_at:
        await _wait_working(workers, functools.partial(_finished_at_least, witness,
                                                       jobs * fraction),
                            timeout=60 if not FULL else 300)
        restarts.append(await _restart(server, workers, witness, outage, jobs,
                                       kill=doomed))
        await r.connection_pool.disconnect()  # the test's own connections died with it
        up = time.monotonic()
        doomed_recovered_in = None
        if doomed:
            doomed = []
            await _wait_working(workers, lambda: forgotten(r, namespace, "fault-6-victim"),
                                timeout=30)
            doomed_recovered_in = round(time.monotonic() - up, 3)

    await _wait_working(workers, lambda: _finished_at_least(witness, jobs),
                        timeout=120 if not FULL else 500)
    # Pending settlements drain: nothing stays on an in-progress list, nothing unsettled.
    await _wait_working(workers, lambda: _settled(r, namespace), timeout=30)
    working_seconds = time.monotonic() - began
    counted = {
        "pending_settlements": sum(log_count(w, "will retry (it is not run again)")
                                   for w in workers),
        "settled_late": sum(log_count(w, "late (it was not run again)") for w in workers),
        "strays_requeued": sum(log_count(w, "requeued stray in-progress job") for w in workers),
        "failed_fetches": sum(log_count(w, "fetch failed") for w in workers),
    }
    for worker in workers:
        await worker.stop()
    assert not any((await leftovers(r, namespace)).values())
    keys = Keys(namespace)
    assert await r.scard(keys.processes) == 0
    assert await r.scard(keys.queue_identities("default")) == 0

    starts = await witness.starts()
    assert set(starts) == set(tags)
    finished = {e["tag"] for e in await witness.ran()}
    lost = sorted(set(tags) - finished)
    duplicates = {tag: n for tag, n in starts.items() if n > 1}
    duplicate_runs = sum(n - 1 for n in duplicates.values())
    figures = dict(jobs=jobs, workers=2, concurrency=CONCURRENCY, lost=len(lost),
                   duplicate_runs=duplicate_runs, duplicated_jobs=sorted(duplicates)[:20],
                   restarts=restarts, seconds=round(working_seconds, 2), **counted)
    if victim:
        figures["victim_recovered_in"] = doomed_recovered_in
    return Run(workers, lost, duplicate_runs, restarts, figures, doomed_recovered_in)


async def _restart(server: ServerProcess, workers: list[WorkerProcess], witness: Witness,
                   outage: float, jobs: int, kill: list[WorkerProcess]) -> dict[str, Any]:
    """Stop the server gracefully (SIGKILL the ``kill`` workers meanwhile), start it
    again (same port, same AOF); how long each worker took to finish a job again (None:
    the batch ran out before it did)."""
    done_before = await witness.finished()
    # Each worker's heartbeat and fetch say "failed" once per streak of failures: an
    # outage that begins before they said "recovered" from the last one would go
    # unannounced, and the wait below for it to be noticed would fail.
    await wait_until(lambda: all(_recovered(w) for w in workers), timeout=10)
    noticed = {w.pid: _failures(w) for w in workers}
    stopped_at = time.monotonic()
    server.stop()
    for worker in kill:
        worker.signal(signal.SIGKILL)
        assert await worker.wait_exit(5) == -signal.SIGKILL
    await anyio.sleep(outage)  # the fault's duration, a parameter of the scenario
    # ... and until every worker has run into it (a failed fetch, settle or beat).
    await wait_until(lambda: all(_failures(w) > noticed[w.pid] for w in workers),
                     timeout=10)
    server.start()
    up_wall, up = time.time(), time.monotonic()
    resumed: dict[int, float | None] = {}

    async def every_worker_resumed() -> bool:
        all_done = await witness.finished() >= jobs
        for worker in workers:
            assert worker.alive(), f"worker exited:\n{worker.log()}"
            if worker.pid not in resumed:
                if await witness.last_ran(worker.pid) > up_wall:
                    resumed[worker.pid] = time.monotonic() - up
                elif all_done:
                    resumed[worker.pid] = None
        return len(resumed) == len(workers)

    await wait_until(every_worker_resumed, timeout=30, every=0.02)
    return {"at_finished": done_before, "outage_s": round(up - stopped_at, 3),
            "resumed_in": {str(pid): None if s is None else round(s, 3)
                           for pid, s in resumed.items()}}


def _recovered(worker: WorkerProcess) -> bool:
    """Its heartbeat and fetch streaks are closed: each "failed" has its "recovered"."""
    return all(log_count(worker, f"{what} failed") == log_count(worker, f"{what} recovered")
               for what in ("heartbeat", "fetch"))


def _failures(worker: WorkerProcess) -> int:
    return sum(log_count(worker, text) for text in
               ("fetch failed", "couldn't settle", "heartbeat failed"))


async def _wait_working(workers: list[WorkerProcess],
                        condition: Callable[[], Awaitable[bool]], *, timeout: float) -> None:
    async def check() -> bool:
        for worker in workers:
            assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        return await condition()

    await wait_until(check, timeout=timeout, every=0.05)


async def _finished_at_least(witness: Witness, count: float) -> bool:
    return await witness.finished() >= count


async def _settled(r: redis.asyncio.Redis, namespace: str) -> bool:
    return not await in_progress(r, namespace) and not any(
        (await leftovers(r, namespace)).values())
