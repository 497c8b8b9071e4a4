"""Scenario — a global queue limit through a crash: ``queue_limits={"reports": 2}``,
three worker processes of concurrency 10, a flow of jobs that each hold 0.2 s; one
worker is SIGKILLed while it runs jobs of the queue.

The limit is counted by ``fetch.lua`` from the processes' in-progress lists, so the
dead process's share stays taken until recovery takes its list back (the published
bound), then is free again. Must hold:
- never more than 2 runs inside at once across the processes (the killed process's
  unfinished runs count until the kill);
- every job finishes (the killed process's jobs ran again elsewhere), none lost;
- after the kill, the others take the queue's jobs again within the recovery bound.
"""

from __future__ import annotations

import signal
import time
from typing import Final

import redis.asyncio

from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp, queuelimitapp
from tests.worker.chaos.processes.conftest import (
    FULL,
    READY_TIMEOUT,
    Fleet,
    marks,
    report,
    wait_ready,
)
from tests.worker.chaos.processes.queuelimitapp import QUEUE, most_at_once, read_runs
from tests.workerproc import WorkerProcess

pytestmark = marks(short_timeout=90, full_timeout=240)

LIMIT: Final = 2
SETTINGS: Final = {**chaosapp.SETTINGS, "queues": [QUEUE], "concurrency": 10,
                   "queue_limits": {QUEUE: LIMIT}}
BOUND: Final = chaosapp.SETTINGS["orphan_threshold"] + chaosapp.SETTINGS["recovery_interval"] + 2.0
"""The published recovery bound: a dead process's jobs (and its share) are back within."""
JOBS: Final = 200 if FULL else 60
HOLD: Final = 0.2


async def test_a_queue_limit_holds_through_a_crash_and_the_share_comes_back(
    server: ServerProcess, namespace: str, fleet: Fleet,
) -> None:
    built = queuelimitapp.build(server.url, namespace, **SETTINGS)
    r = redis.asyncio.Redis.from_url(server.url)
    try:
        workers = [_start(fleet, server, namespace) for _ in range(3)]
        await wait_ready(r, namespace, workers)
        await built.limited.enqueue_many([((f"j{i}", HOLD), {}) for i in range(JOBS)])

        # Wait until some worker runs jobs of the queue, then kill it mid-hold.
        victim: list[WorkerProcess] = []

        async def someone_runs() -> bool:
            open_pids = {run.pid for run in await read_runs(r, namespace) if run.end is None}
            victim[:] = [w for w in workers if w.pid in open_pids]
            return bool(victim) and len(await read_runs(r, namespace)) >= JOBS // 4
        await wait_until(someone_runs, timeout=READY_TIMEOUT, every=0.01)
        victim[0].signal(signal.SIGKILL)
        killed_at = time.time()
        await victim[0].wait_exit(timeout=10)

        async def all_done() -> bool:
            finished = {run.tag for run in await read_runs(r, namespace) if run.end}
            return len(finished) == JOBS
        await wait_until(all_done, timeout=BOUND + JOBS * HOLD / LIMIT + 30, every=0.1)
        runs = await read_runs(r, namespace)
    finally:
        await r.aclose()
        await built.app.close()

    killed = victim[0].pid
    held_when_killed = [run for run in runs if run.end is None]
    assert {run.pid for run in held_when_killed} <= {killed}
    most = most_at_once(runs, {killed: killed_at})
    first_start_after = min((run.start for run in runs
                             if run.pid != killed and run.start > killed_at), default=None)
    resumed_after = None if first_start_after is None else first_start_after - killed_at
    report("queue-limit-crash", jobs=JOBS, limit=LIMIT, most_at_once=most,
           held_by_the_killed=len(held_when_killed), runs=len(runs),
           resumed_after=None if resumed_after is None else round(resumed_after, 2))
    assert most <= LIMIT, f"{most} runs at once with a limit of {LIMIT}"
    assert most == LIMIT  # a limit, not a single lane
    assert {run.tag for run in runs if run.end} == {f"j{i}" for i in range(JOBS)}
    assert held_when_killed, "the victim held no job when it was killed"
    # Ran twice: only what the victim held when it died.
    finished_twice = [tag for tag in {run.tag for run in runs}
                      if sum(1 for run in runs if run.tag == tag and run.end) > 1]
    assert finished_twice == []
    assert resumed_after is not None
    assert resumed_after <= BOUND + 1.0, resumed_after


def _start(fleet: Fleet, server: ServerProcess, namespace: str) -> WorkerProcess:
    worker = WorkerProcess(server.url, namespace, SETTINGS, ["--log-level", "WARNING"],
                           target=queuelimitapp.TARGET)
    fleet.started.append(worker)
    return worker.start()
