"""Workers and an enqueuer on ``redis+sentinel://`` while the master moves.

1. Smoke: a worker runs jobs; after ``SENTINEL FAILOVER`` it runs new jobs on the new
   master within seconds, the enqueuer on the same URL keeps enqueuing without an
   error or a loss, nothing of ours keeps knocking on the demoted master (its READONLY
   count stays put), and the worker listens for wake-ups on the new master within
   seconds (not only once Sentinel throws it off the old one, 8-10 s later).
2. A flow of jobs (3 workers, one enqueuer) with ``SENTINEL FAILOVER`` mid-flow; every
   worker is back on the new master within seconds and the enqueuer keeps going. With
   ``durability="replica"`` every job whose enqueue returned runs. Without it, Sentinel
   leaves the old master writable after promoting the replica, so what it acknowledged
   until the clients follow is lost: the assertion is that every loss lies in that
   window (``FOLLOW_EVERY`` after the sentinels name the new master), not after it.
3. The master SIGKILLed mid-flow (the replica promoted, the killed node restarted as
   its replica): without durability, asynchronous replication may lose acknowledged
   writes — figures only; with ``durability="replica"`` every enqueue that returned
   runs.

Every scenario prints ``CHAOS sentinel_<scenario> {json}``: ``lost`` (an enqueue
returned a jid, the job never ran), ``run_twice``, ``failed_enqueues`` (the enqueue
raised: the caller knows), ``recover_seconds`` (from the fault to every worker beating
and finishing jobs on the new master), ``wake_listening_seconds`` (to every worker
subscribed to wake-ups there).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.to_thread
import pytest
import redis
import redis.asyncio

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.sentinel import FOLLOW_EVERY
from tests.redis.sentinel.conftest import StartWorker
from tests.sentinel_harness import HOST, SentinelTopology
from tests.waiting import wait_until
from tests.worker.chaos.redisfaults.conftest import (
    FULL,
    READY_TIMEOUT,
    Witness,
    leftovers,
    report,
    size,
)
from tests.worker.chaos.redisfaults.faultapp import Jobs
from tests.workerproc import WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900 if FULL else 90),
              *([pytest.mark.chaos] if FULL else [])]

CONCURRENCY: Final = 10
WORKERS: Final = 3
FLOW_JOBS: Final = size(300, 10_000)
FAULT_AT: Final = 0.3
"""Fraction of the flow's enqueues acknowledged when the fault is injected."""
AFTER_FAULT: Final = size(100, 1000)
"""Enqueues that must still be made after the new master is in place: the flow goes on
across the fault, whatever the machine's speed."""
ENQUEUE_PACE: Final = 0.004
"""Seconds between two enqueues: a steady flow (not a burst done before the fault)."""
DURABLE_AFTER_FAULT: Final = AFTER_FAULT // 4
"""Enqueues that must have returned after the fault with ``durability="replica"``: each
waits for the one replica, and a replica that has just rejoined may confirm slowly
(seen once on Valkey in CI: about one write a second for 10 s, none lost). The flow
still aims at ``AFTER_FAULT`` (for up to ``DURABLE_KEEP_GOING`` s); the enqueuer must be
back, writing durably, and nothing it was told is written may be lost."""
DURABLE_KEEP_GOING: Final = 30.0
"""Seconds after the fault the durable flow may go on to reach ``AFTER_FAULT``."""
RECOVER_BOUND: Final = 10.0
"""Seconds from the fault to every worker beating and finishing jobs on the new master.
Detection (1 s), election and promotion take 1-3 s, the clients follow within one
``FOLLOW_EVERY`` and a beat; the rest is a loaded 2-core machine."""
SETTLE_TIMEOUT: Final = size(60, 300)
"""Seconds for everything enqueued to be run and settled once the flow stops."""
LISTEN_WAIT: Final = 60.0
"""Seconds the figures wait for every wake-up subscriber on the new master."""
WAKE_BOUND: Final = 5.0
"""Seconds from ``SENTINEL FAILOVER`` to the worker listening for wake-ups on the new
master. Sentinel demotes the old master only some 8-10 s after the promotion; a
subscriber that stays until it is thrown off misses every wake-up meanwhile (jobs wait
for the fallback poll, ``idle_fetch_interval``)."""
STEADY_JOBS: Final = 50
"""Jobs run after the old master's demotion while its READONLY count must stay put."""
WINDOW_SLACK: Final = 1.0
"""Seconds added to ``FOLLOW_EVERY`` after the harness saw the new master: how late an
enqueue the old master acknowledged may still return (a loaded 2-core machine)."""
LOST_SHOWN: Final = 20
"""Lost jobs whose timing the report shows."""
ERROR_KINDS: Final = 5
"""Distinct enqueue errors kept for the report."""


# -- the flow ---------------------------------------------------------------------------


@dataclass
class Flow:
    """What the enqueuer saw, and when the fault happened (epoch seconds)."""

    acked: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    fault_began: float | None = None
    promoted: float | None = None
    """When the harness saw the new master agreed on and answering ROLE master."""
    fault_done: float | None = None
    """``promoted``, or when ``then`` (e.g. restarting the killed node) returned."""
    back_at: float | None = None
    """When every worker was seen back on the new master (``wait_back``)."""
    listening_at: float | None = None
    """When every worker was seen listening for wake-ups there (``wait_listening``)."""
    old: int = 0
    new: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    """Acknowledged, never run (set by ``figures``), by time of acknowledgement."""

    def acked_after_fault(self) -> int:
        done = self.fault_done
        return 0 if done is None else sum(1 for t in self.acked.values() if t > done)


async def run_flow(  # noqa: C901 - one flow, its fault and its watchers, in order
        topology: SentinelTopology, jobs: Jobs, fault: Callable[[], tuple[int, int]],
                   back: Callable[[float], Awaitable[float]],
                   listening: Callable[[], Awaitable[float]], *, count: int, after_fault: int,
                   keep_going: float,
                   then: Callable[[Flow], Awaitable[None]] | None = None,
                   back_after_then: bool = False) -> Flow:
    """Enqueue ``count`` jobs one by one at a steady pace; once ``FAULT_AT`` of them are
    acknowledged, run ``fault`` (a harness call, in a thread: the enqueuer goes on
    meanwhile), then ``then(flow)`` and, alongside the flow, ``back(promoted)`` (when
    the workers are back); go on until ``after_fault`` enqueues returned after the fault
    (or ``keep_going`` s after it, when they keep failing) and the workers are back."""
    flow = Flow()

    async def watch(promoted: float) -> None:
        flow.back_at = await back(promoted)

    async def watch_listening() -> None:
        flow.listening_at = await listening()

    async def inject() -> None:
        flow.fault_began = time.time()
        flow.old, flow.new = await anyio.to_thread.run_sync(fault)
        flow.promoted = time.time()
        group.start_soon(watch_listening)
        if not back_after_then:
            group.start_soon(watch, flow.promoted)
        if then is not None:
            await then(flow)
        if back_after_then:
            # The single replica rejoining: until then, durable settles cannot be
            # confirmed and are held, so "back" is bounded from here (the figure still
            # counts from the promotion).
            group.start_soon(watch, flow.promoted)
        flow.fault_done = time.time()

    async with anyio.create_task_group() as group:
        index = 0
        while True:
            done = flow.fault_done
            # Jobs keep coming until every worker is seen back (each must run one after
            # the fault): stopped at ``count``, the last few jobs could all go to one
            # worker, and the others would wait for work that never came.
            if index >= count and done is not None and (
                    (flow.acked_after_fault() >= after_fault and flow.back_at is not None)
                    or time.time() > done + keep_going):
                break
            tag = f"job-{index}"
            index += 1
            try:
                await jobs.record.enqueue(tag)
            except redis.exceptions.RedisError as exc:
                flow.failed[tag] = f"{type(exc).__name__}: {exc}"
                flow.errors[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
            else:
                flow.acked[tag] = time.time()
            if flow.fault_began is None and len(flow.acked) >= count * FAULT_AT:
                group.start_soon(inject)
            await anyio.sleep(ENQUEUE_PACE)
    return flow


async def master_client(port: int) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(host=HOST, port=port)


async def subscribed(port: int, namespace: str) -> int:
    """How many connections listen for wake-ups on the node on ``port``."""
    client = await master_client(port)
    try:
        ((_, count),) = await client.pubsub_numsub(Keys(namespace).wake_channel)
        return int(count)
    finally:
        await client.aclose()


async def wait_ready(topology: SentinelTopology, namespace: str,
                     workers: list[WorkerProcess]) -> None:
    """Until every worker listens for wake-ups on the master (its Manager runs)."""
    port = topology.master_port()

    async def ready() -> bool:
        for worker in workers:
            assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        return await subscribed(port, namespace) >= len(workers)

    await wait_until(ready, timeout=READY_TIMEOUT, every=0.05)


async def beating_on(port: int, namespace: str, since: float) -> set[int]:
    """Pids of the workers whose last beat on the node on ``port`` is later than
    ``since`` (epoch seconds): they write to it."""
    keys = Keys(namespace)
    client = await master_client(port)
    try:
        stamps = await client.hgetall(keys.last_beat)
        infos = await client.hgetall(keys.beats)
    finally:
        await client.aclose()
    pids = set()
    for identity, stamp in stamps.items():
        if float(stamp) > since and identity in infos:
            pids.add(int(json.loads(infos[identity])["pid"]))
    return pids


async def wait_back(topology: SentinelTopology, namespace: str, witness: Witness,
                    workers: list[WorkerProcess], since: float, timeout: float) -> float:
    """Until every worker beats on the new master and has finished a job after
    ``since``; returns the epoch second it was seen."""
    port = topology.master_port()
    pids = {worker.pid for worker in workers}

    async def back() -> bool:
        if not pids <= await beating_on(port, namespace, since):
            return False
        for pid in pids:
            if await witness.last_ran(pid) <= since:
                return False
        return True

    try:
        await wait_until(back, timeout=timeout, every=0.1)
    except AssertionError:
        beating = await beating_on(port, namespace, since)
        ran = {pid: round(await witness.last_ran(pid) - since, 2) for pid in pids}
        raise AssertionError(f"not back within {timeout}s of {since:.2f}: beating on the "
                             f"new master {sorted(beating)} of {sorted(pids)}; last run "
                             f"after it, per pid (s): {ran}") from None
    return time.time()


async def wait_listening(topology: SentinelTopology, namespace: str,
                         workers: list[WorkerProcess], timeout: float) -> float:
    """Until every worker listens for wake-ups on the new master (an enqueue wakes it
    at once, not at its next fallback poll); returns the epoch second it was seen."""
    port = topology.master_port()
    await wait_until(lambda: _at_least(subscribed(port, namespace), len(workers)),
                     timeout=timeout, every=0.1)
    return time.time()


async def _at_least(count: Awaitable[int], least: int) -> bool:
    return await count >= least


async def settle(topology: SentinelTopology, namespace: str) -> None:
    """Until the new master holds nothing more to run (every queue, set and in-progress
    list empty): every run that will ever happen has been recorded."""
    client = await master_client(topology.master_port())
    try:
        async def empty() -> bool:
            return not any((await leftovers(client, namespace)).values())

        await wait_until(empty, timeout=SETTLE_TIMEOUT, every=0.2)
    finally:
        await client.aclose()


async def figures(witness: Witness, flow: Flow) -> dict[str, Any]:
    finished = set((await witness.runs()).keys())
    runs = await witness.runs()
    lost = sorted((tag for tag in flow.acked if tag not in finished), key=flow.acked.__getitem__)
    flow.lost = lost
    began = flow.fault_began or 0.0
    promoted = flow.promoted or began
    return {
        "enqueued": len(flow.acked) + len(flow.failed),
        "acked": len(flow.acked),
        "failed_enqueues": len(flow.failed),
        "failed_but_ran": sum(1 for tag in flow.failed if tag in finished),
        "lost": len(lost),
        "lost_sample": lost[:LOST_SHOWN],
        # When each lost job's enqueue returned, in seconds after the harness saw the
        # new master agreed on (negative: before).
        "lost_acked_after_promotion": [round(flow.acked[tag] - promoted, 3)
                                       for tag in lost[:LOST_SHOWN]],
        "run_twice": sum(1 for count in runs.values() if count > 1),
        "failover_seconds": round((flow.promoted or began) - began, 2),
        "ready_seconds": _since(flow.fault_done, began),
        "recover_seconds": _since(flow.back_at, began),
        "wake_listening_seconds": _since(flow.listening_at, began),
        "enqueue_errors": dict(flow.errors.most_common(ERROR_KINDS)),
    }


def _since(moment: float | None, began: float) -> float | None:
    return None if moment is None else round(moment - began, 2)


async def stop_all(workers: list[WorkerProcess]) -> None:
    """SIGTERM each worker: each exits 0 (it was healthy to the end)."""
    for worker in workers:
        await worker.stop(timeout=15.0)


# -- 1. smoke ---------------------------------------------------------------------------


async def test_worker_and_enqueuer_follow_a_failover(
    topology: SentinelTopology, start_worker: StartWorker,
    make_jobs: Callable[..., Jobs], witness: Witness, namespace: str,
) -> None:
    jobs = make_jobs(topology.url)
    worker = start_worker(topology.url, "--concurrency", str(CONCURRENCY))
    await wait_ready(topology, namespace, [worker])
    before = [f"before-{i}" for i in range(20)]
    for tag in before:
        await jobs.record.enqueue(tag)
    await wait_until(lambda: _finished(witness, before), timeout=15)

    began = time.time()
    old, new = await anyio.to_thread.run_sync(topology.failover)
    promoted = time.time()
    after = [f"after-{i}" for i in range(20)]
    # Straight away: nothing may raise, nothing may be lost. The enqueuer sat idle
    # through the failover (over a second: election, promotion, the sentinels' INFO
    # round), longer than FOLLOW_EVERY, so its first enqueue asks the sentinels afresh.
    for tag in after:
        await jobs.record.enqueue(tag)
    await wait_until(lambda: _finished(witness, after), timeout=RECOVER_BOUND)
    back_at = await wait_back(topology, namespace, witness, [worker], promoted,
                              RECOVER_BOUND)
    listening_at = await wait_listening(topology, namespace, [worker], LISTEN_WAIT)

    # The sentinels demote the old master some seconds later; from then on nothing of
    # ours writes to it: its READONLY count stays put while jobs keep flowing.
    await anyio.to_thread.run_sync(topology.wait_demoted, old)
    readonly_before = _readonly_errors(topology, old)
    steady = [f"steady-{i}" for i in range(STEADY_JOBS)]
    for tag in steady:
        await jobs.record.enqueue(tag)
    await wait_until(lambda: _finished(witness, steady), timeout=RECOVER_BOUND)
    readonly_after = _readonly_errors(topology, old)
    old_subscribers = await subscribed(old, namespace)
    runs = await witness.runs()
    report("sentinel_smoke", old=old, new=new, failover_seconds=round(promoted - began, 2),
           recover_seconds=round(back_at - began, 2),
           wake_listening_seconds=round(listening_at - began, 2),
           readonly_on_old=readonly_after,
           readonly_while_steady=readonly_after - readonly_before,
           old_subscribers=old_subscribers,
           run_twice=sum(1 for count in runs.values() if count > 1))
    assert readonly_after == readonly_before, "READONLY loop on the demoted master"
    assert old_subscribers == 0, "the wake-up subscriber stayed on the demoted master"
    assert back_at - began <= RECOVER_BOUND
    await stop_all([worker])
    assert listening_at - began <= WAKE_BOUND, "wake-ups still subscribed on the old master"


def _readonly_errors(topology: SentinelTopology, port: int) -> int:
    """How many READONLY errors the node on ``port`` has answered (INFO errorstats)."""
    stats = topology.info(port, "errorstats")
    entry = stats.get("errorstat_READONLY")
    return int(entry["count"]) if isinstance(entry, dict) else 0


async def _finished(witness: Witness, tags: list[str]) -> bool:
    runs = await witness.runs()
    return all(tag in runs for tag in tags)


# -- 2. flow under SENTINEL FAILOVER ----------------------------------------------------


@pytest.mark.parametrize("durability", [None, "replica"])
async def test_flow_through_a_failover(
    topology: SentinelTopology, start_worker: StartWorker,
    make_jobs: Callable[..., Jobs], witness: Witness, namespace: str,
    durability: str | None,
) -> None:
    """Without durability, the enqueues the old master acknowledged between the
    replica's promotion and the moment the clients follow are lost: Sentinel (Redis
    7.0) promotes with ``REPLICAOF NO ONE`` and leaves the old master a writable master
    for seconds, and even the sentinels name it for a moment after the promotion. So
    the assertion there is that every loss is confined to that window. With
    ``durability="replica"`` the old master can confirm nothing once its replica is
    promoted (``WAIT`` finds none): every enqueue that returned runs. Its single
    replica — the demoted old master — is back some 10 s later; until then durable
    enqueues raise, which the figures show."""
    async def demoted(flow: Flow) -> None:
        await anyio.to_thread.run_sync(topology.wait_demoted, flow.old)

    flow, found = await _scenario(
        topology, start_worker, make_jobs, witness, namespace, durability,
        fault=topology.failover, then=None if durability is None else demoted,
        back_after_then=durability is not None)
    report(_name("sentinel_failover", durability), durability=durability, **found)
    if durability is None:
        assert flow.promoted is not None
        window_end = flow.promoted + FOLLOW_EVERY + WINDOW_SLACK
        late = [tag for tag in flow.lost if flow.acked[tag] > window_end]
        assert late == [], found
    else:
        assert found["lost"] == 0, found
    _check_recovered(flow, found, durability)


# -- 3. the master SIGKILLed mid-flow ---------------------------------------------------


@pytest.mark.parametrize("durability", [None, "replica"])
async def test_flow_through_a_killed_master(
    topology: SentinelTopology, start_worker: StartWorker,
    make_jobs: Callable[..., Jobs], witness: Witness, namespace: str,
    durability: str | None,
) -> None:
    """Without durability, asynchronous replication may lose what the killed master
    acknowledged last: figures only. With ``durability="replica"`` every enqueue that
    returned runs. With one replica, that durability cannot be met while the promoted
    master has none: the killed node is restarted as its replica (as an operator or an
    orchestrator would), and the flow goes on."""
    async def restart(flow: Flow) -> None:
        await anyio.to_thread.run_sync(topology.restart_old_master_as_replica, flow.old)

    flow, found = await _scenario(topology, start_worker, make_jobs, witness, namespace,
                                  durability, fault=topology.kill_master, then=restart,
                                  back_after_then=durability is not None)
    report(_name("sentinel_kill", durability), durability=durability, **found)
    if durability is not None:
        assert found["lost"] == 0, found
    _check_recovered(flow, found, durability)


async def _scenario(
    topology: SentinelTopology, start_worker: StartWorker,
    make_jobs: Callable[..., Jobs], witness: Witness, namespace: str,
    durability: str | None, *, fault: Callable[[], tuple[int, int]],
    then: Callable[[Flow], Awaitable[None]] | None, back_after_then: bool = False,
) -> tuple[Flow, dict[str, Any]]:
    """``WORKERS`` workers and the test's enqueuer through ``fault``; every worker
    stopped cleanly at the end. Returns the flow and its figures."""
    settings = {} if durability is None else {"durability": durability}
    jobs = make_jobs(topology.url, **settings)
    workers = [start_worker(topology.url, "--concurrency", str(CONCURRENCY), **settings)
               for _ in range(WORKERS)]
    await wait_ready(topology, namespace, workers)

    async def back(since: float) -> float:
        return await wait_back(topology, namespace, witness, workers, since, RECOVER_BOUND)

    async def listening() -> float:
        return await wait_listening(topology, namespace, workers, LISTEN_WAIT)

    flow = await run_flow(topology, jobs, fault, back, listening, count=FLOW_JOBS,
                          after_fault=AFTER_FAULT,
                          keep_going=RECOVER_BOUND if durability is None else DURABLE_KEEP_GOING,
                          then=then,
                          back_after_then=back_after_then)
    await settle(topology, namespace)
    found = await figures(witness, flow)
    await stop_all(workers)
    return flow, found


def _check_recovered(flow: Flow, found: dict[str, Any], durability: str | None) -> None:
    """Every worker back within ``RECOVER_BOUND`` of the topology taking writes again:
    with ``durability="replica"`` and one replica, nothing is confirmed until the old
    master replicates again (``then``: demoted 8-10 s after a failover, or restarted
    after a kill), and jobs to run are scarce until then (each enqueue waits 1 s)."""
    assert found["recover_seconds"] <= found["ready_seconds"] + RECOVER_BOUND, found
    least = AFTER_FAULT if durability is None else DURABLE_AFTER_FAULT
    assert flow.acked_after_fault() >= least, found  # the enqueuer kept going


def _name(scenario: str, durability: str | None) -> str:
    return scenario if durability is None else f"{scenario}_{durability}"
