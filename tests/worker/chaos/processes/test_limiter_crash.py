"""Scenario — a concurrent limiter across three worker processes, and a holder's crash:
``concurrent=3``, three worker processes of concurrency 10 (30 slots for 3 places).

1. A flow of jobs that each hold the limiter for 50 ms. Must hold: never more than 3
   inside at once (counted from the runs' own records, and sampled in Redis from the
   holders zset), every job done, the refused ones rescheduled (not failed).
2. Three jobs hold the three slots until told; the process holding one of them is
   SIGKILLed mid-hold. Its slot belongs to its identity and lives as long as the
   process's alive marker (whose TTL is ``orphan_threshold``): it must be free again
   within the published recovery bound, freed by the next acquisition that needs it —
   no TTL on the hold itself; nothing lost (the killed job runs again elsewhere once its
   process is recovered), and never more than 3 inside at once (the killed run counts
   until the kill).
"""

from __future__ import annotations

import secrets
import signal
import time
from typing import Final, cast

import anyio
import redis.asyncio

from cogworker_async.redis import limits
from cogworker_async.redis.limits import holder_member, identity_of
from cogworker_async.redis.store import Store
from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp, limiterapp
from tests.worker.chaos.processes.conftest import (
    FULL,
    READY_TIMEOUT,
    Fleet,
    marks,
    report,
    wait_ready,
)
from tests.worker.chaos.processes.conftest import (
    identity_of as identity_of_worker,
)
from tests.worker.chaos.processes.limiterapp import LIMIT, LIMITER, QUEUE, read_runs, release_key
from tests.worker.chaos.processes.queuelimitapp import most_at_once
from tests.workerproc import WorkerProcess

pytestmark = marks(short_timeout=120, full_timeout=300)

SETTINGS: Final = {**chaosapp.SETTINGS, "queues": [QUEUE], "concurrency": 10}
BOUND: Final = chaosapp.SETTINGS["orphan_threshold"] + chaosapp.SETTINGS["recovery_interval"] + 2.0
"""The published recovery bound (a dead process's jobs are back within it): its slots
are free again within it too (its alive marker expires ``orphan_threshold`` after its
last beat)."""
JOBS: Final = 200 if FULL else 60
HOLD: Final = 0.05
PROBE_EVERY: Final = 0.02
"""Seconds between the test's own tries for a slot while the victim's is held."""


class Sampler:
    """The most holders ever seen in the holders zset (sampled every few ms)."""

    def __init__(self, r: redis.asyncio.Redis, key: str) -> None:
        self.r, self.key, self.most = r, key, 0

    async def run(self) -> None:
        while True:
            self.most = max(self.most, int(await self.r.zcard(self.key)))
            await anyio.sleep(0.005)


async def test_a_concurrent_limiter_holds_across_processes_and_a_killed_holders_slot_comes_back(
    server: ServerProcess, namespace: str, fleet: Fleet,
) -> None:
    built = limiterapp.build(server.url, namespace, **SETTINGS)
    store = Store.from_url(server.url, namespace)
    r = redis.asyncio.Redis.from_url(server.url)
    holders_key = store.keys.limiter(LIMITER, "holders")
    sampler = Sampler(r, holders_key)
    try:
        workers = [_start(fleet, server, namespace) for _ in range(3)]
        await wait_ready(r, namespace, workers)
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler.run)
            flow = await _flow(r, namespace, built)
            killed, killed_at, freed_after, victim_identity = await _kill_a_holder(
                r, namespace, built, store, workers)
            tg.cancel_scope.cancel()
        runs, reschedules = await read_runs(r, namespace)
    finally:
        await r.aclose()
        await store.aclose()
        await built.app.close()

    held_when_killed = [run for run in runs if run.end is None]
    most = most_at_once(runs, {killed: killed_at})
    report("limiter", jobs=JOBS, limit=LIMIT, most_at_once=most, sampled_most=sampler.most,
           reschedules=sum(reschedules), most_reschedules_of_a_run=max(reschedules),
           flow_seconds=round(flow, 2),
           held_by_the_killed=len(held_when_killed), slot_freed_after=round(freed_after, 2),
           bound=BOUND, lost=0)
    assert most <= LIMIT, f"{most} runs inside at once with a limit of {LIMIT}"
    assert most == LIMIT  # a limit, not a single lane
    assert sampler.most <= LIMIT
    assert sum(reschedules) > 0, "30 slots for 3 places: some runs were refused"
    # Within max_limit_reschedules (20): no run was failed by its refusals.
    assert max(reschedules) <= 20
    expected = {f"j{i}" for i in range(JOBS)} | {f"long{i}" for i in range(LIMIT)}
    assert {run.tag for run in runs if run.end} == expected  # nothing lost
    assert {run.pid for run in held_when_killed} == {killed}
    assert freed_after <= BOUND, freed_after
    assert victim_identity


async def _flow(r: redis.asyncio.Redis, namespace: str, built: limiterapp.Jobs) -> float:
    """Phase 1: JOBS jobs through the limiter; seconds until all are done."""
    began = time.monotonic()
    await built.held.enqueue_many([((f"j{i}", HOLD), {}) for i in range(JOBS)])

    async def all_done() -> bool:
        runs, _ = await read_runs(r, namespace)
        return len({run.tag for run in runs if run.end}) == JOBS
    await wait_until(all_done, timeout=60 + JOBS * HOLD, every=0.1)
    return time.monotonic() - began


async def _kill_a_holder(
    r: redis.asyncio.Redis, namespace: str, built: limiterapp.Jobs, store: Store,
    workers: list[WorkerProcess],
) -> tuple[int, float, float, str]:
    """Phase 2: the three slots held until told; a holder's process SIGKILLed. Returns
    its pid, when it was killed, how long its slot took to be free again, its
    identity."""
    await built.held_until.enqueue_many([((f"long{i}",), {}) for i in range(LIMIT)])
    holding: list[WorkerProcess] = []

    async def all_held() -> bool:
        runs, _ = await read_runs(r, namespace)
        open_runs = [run for run in runs if run.end is None and run.tag.startswith("long")]
        holding[:] = [w for w in workers if w.pid in {run.pid for run in open_runs}]
        return len(open_runs) == LIMIT
    await wait_until(all_held, timeout=READY_TIMEOUT + 30, every=0.05)
    victim = holding[0]
    identity = await identity_of_worker(r, namespace, victim)
    victim.signal(signal.SIGKILL)
    killed_at = time.time()
    await victim.wait_exit(timeout=10)

    # The test asks for a slot (as a caller outside any worker) every PROBE_EVERY s: the
    # acquisition that finds the limiter full frees the slots of gone processes. The
    # slot is back once no holder of the victim is left.
    probe = holder_member(None, "probe", secrets.token_hex(8), 60.0)

    async def victims_slot_freed() -> bool:
        decision = await limits.take_slot(store, LIMITER, LIMIT, probe)
        if decision.admitted:
            await limits.release_slot(store, LIMITER, probe)
        members = await r.zrange(store.keys.limiter(LIMITER, "holders"), 0, -1)
        return all(identity_of(cast(bytes, member)) != identity for member in members)
    await wait_until(victims_slot_freed, timeout=BOUND + 10, every=PROBE_EVERY)
    freed_after = time.time() - killed_at

    await r.set(release_key(namespace), "1")

    async def all_ended() -> bool:  # the killed job ran again elsewhere: all three end
        runs, _ = await read_runs(r, namespace)
        return {run.tag for run in runs if run.end and run.tag.startswith("long")} == {
            f"long{i}" for i in range(LIMIT)}
    await wait_until(all_ended, timeout=BOUND + 30, every=0.1)
    return victim.pid, killed_at, freed_after, identity


def _start(fleet: Fleet, server: ServerProcess, namespace: str) -> WorkerProcess:
    worker = WorkerProcess(server.url, namespace, SETTINGS, ["--log-level", "WARNING"],
                           target=limiterapp.TARGET)
    fleet.started.append(worker)
    return worker.start()
