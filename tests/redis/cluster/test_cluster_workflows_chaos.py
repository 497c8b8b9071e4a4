"""Workflows on Redis Cluster while their slots move: batches (their keys in the
namespace's slot) and chains (each waiting step in its own queue's slot) over six queues
on three masters, while the namespace's slot and then the slot of a queue holding
waiting steps are live-resharded to another master (``redis-cli --cluster reshard``'s
protocol, slot by slot).

Must hold: every member and every step ran, once (no process died); each batch's
on_complete ran once; no step started before the step before it finished; nothing left
waiting, no note left for the relay.
"""

from __future__ import annotations

import random
import time
from typing import Final

import anyio
import redis.asyncio
import redis.exceptions

from cogworker_async.redis.keys import Keys
from tests.cluster_harness import ClusterProcess
from tests.redis.cluster import clusterapp
from tests.redis.cluster.test_cluster_chaos import (
    FULL,
    Flow,
    flows,
    own_cluster,
    pytestmark,
    r,
    report,
    spread_queues,
)
from tests.waiting import wait_until
from tests.workerproc import worker_pool

__all__ = ["flows", "own_cluster", "pytestmark", "r"]  # the fixtures, shared

SIZES: Final = (100, 20, 100) if FULL else (20, 10, 20)
"""(batches, members per batch, chains)."""
STEPS: Final = 3


async def _settled(flow: Flow, tags: list[str]) -> bool:
    try:
        return await _quiet(flow, tags)
    except (redis.exceptions.ConnectionError, redis.exceptions.ClusterDownError):
        return False  # a master just died: the test's client finds its successor next time


async def _left(flow: Flow, tags: list[str]) -> dict[str, object]:
    """What keeps a scenario from settling (for the failure message)."""
    keys, r = flow.keys, flow.r
    finished = await flow.finished()
    left: dict[str, object] = {"unfinished": [t for t in tags if finished[t] < 1][:10]}
    for queue in flow.queues:
        left[queue] = [await r.llen(keys.queue(queue)), await r.zcard(keys.waiting(queue)),
                       await r.zcard(keys.arming(queue)), await r.llen(keys.batch_notes(queue))]
    left["firing"] = await r.zcard(keys.batches_firing)
    left["in_progress"] = [k async for k in r.scan_iter(match=keys.in_progress_pattern)][:5]
    return left


async def _wait_settled(flow: Flow, tags: list[str], timeout: float) -> None:
    try:
        await wait_until(lambda: _settled(flow, tags), timeout=timeout, every=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: left {await _left(flow, tags)}") from None


async def _states(flow: Flow, bids: list[str]) -> list[str]:
    """Each batch's state, read by the enqueuer's App: its first call after a failover
    meets the dead node and reads the slot map again (Unavailable: a caller tries again)."""
    for attempt in range(3):
        try:
            return [(await flow.jobs.app.batch_status(bid)).state for bid in bids]
        except redis.exceptions.ConnectionError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def _quiet(flow: Flow, tags: list[str]) -> bool:
    if not await flow.quiescent(tags):
        return False
    keys = flow.keys
    for queue in flow.queues:
        if await flow.r.zcard(keys.waiting(queue)) or await flow.r.llen(keys.batch_notes(queue)):
            return False
    return not await flow.r.zcard(keys.batches_firing)


class Mover:
    """Moves slots to another master, noting how much was in flight and how long each
    move took."""

    def __init__(self, cluster: ClusterProcess, r: redis.asyncio.Redis, keys: Keys,
                 queues: list[str]) -> None:
        self.cluster, self.r, self.keys, self.queues = cluster, r, keys, queues
        self.seconds: list[float] = []
        self.in_flight: list[int] = []
        self.halfway = anyio.Event()

    async def move(self, slot: int) -> None:
        target = next(port for _, port in self.cluster.masters()
                      if port != self.cluster.port_of_slot(slot))
        self.in_flight.append(await self.r.zcard(self.keys.batches_open) + sum(
            [await self.r.zcard(self.keys.waiting(q)) for q in self.queues]))
        moved_at = time.monotonic()
        await anyio.to_thread.run_sync(self.cluster.move_slot, slot, target)
        self.seconds.append(round(time.monotonic() - moved_at, 2))
        assert self.cluster.port_of_slot(slot) == target

    async def run(self) -> None:
        await self.halfway.wait()  # while batches are open and members pending
        await self.move(self.cluster.slot_of(self.keys.batches))
        # the first queue: chain steps wait on it
        await self.move(self.cluster.slot_of(self.keys.queue(self.queues[0])))


async def _enqueue(jobs: clusterapp.Jobs, queues: list[str], mover: Mover,
                   rng: random.Random, seconds: tuple[float, float] = (0.01, 0.05)) -> list[str]:
    """The batches (the moves start a third of the way) and the chains; the bids."""
    batches, members, chains = SIZES
    bids = []
    for b in range(batches):
        if b == batches // 3:
            mover.halfway.set()
        async with jobs.app.batch(on_complete=jobs.callback.s("complete")) as batch:
            for m in range(members):
                await jobs.work.options(queue=queues[(b + m) % len(queues)]).enqueue(
                    f"b{b}m{m}", round(rng.uniform(*seconds), 3))
        bids.append(batch.bid)
    for c in range(chains):
        await jobs.app.chain(*[
            jobs.node.options(queue=queues[(c + k) % len(queues)]).s(
                f"c{c}s{k}", round(rng.uniform(0.05, 0.2), 3)) for k in range(STEPS)
        ]).enqueue()
    return bids


async def _early_steps(r: redis.asyncio.Redis, namespace: str) -> list[str]:
    """Chain steps whose first start came before the last finish of the step before."""
    first_start: dict[str, int] = {}
    last_finish: dict[str, int] = {}
    events = await r.lrange(clusterapp.events_key(namespace), 0, -1)
    for index, (kind, tag) in enumerate(entry.decode().split(" ", 1) for entry in events):
        if kind == "S":
            first_start.setdefault(tag, index)
        else:
            last_finish[tag] = index
    return [f"c{c}s{k}" for c in range(SIZES[2]) for k in range(1, STEPS)
            if first_start[f"c{c}s{k}"] < last_finish[f"c{c}s{k - 1}"]]


async def test_batches_and_chains_through_live_reshards_of_their_slots(
    own_cluster: ClusterProcess, r: redis.asyncio.Redis, namespace: str, flows: list[Flow]
) -> None:
    batches, members, chains = SIZES
    keys = Keys(namespace)
    spread = spread_queues(own_cluster, namespace)
    queues = [name for names in spread.values() for name in names]
    tags = [f"b{b}m{m}" for b in range(batches) for m in range(members)] + [
        f"c{c}s{k}" for c in range(chains) for k in range(STEPS)]
    mover = Mover(own_cluster, r, keys, queues)
    with worker_pool() as workers:
        flow = Flow(own_cluster, r, namespace, queues, workers)
        flows.append(flow)
        for _ in range(2):
            flow.start_worker()
        await flow.wait_ready()
        async with anyio.create_task_group() as tg:
            tg.start_soon(mover.run)
            bids = await _enqueue(flow.jobs, queues, mover, random.Random(11))
        await _wait_settled(flow, tags, timeout=240)
        for worker in flow.workers:
            assert worker.alive(), worker.log()
        await flow.stop_all()
        started = await flow.started()

    twice = [tag for tag in tags if started[tag] != 1]
    callbacks = {bid: started[f"complete:{bid}"] for bid in bids}
    early = await _early_steps(r, namespace)
    report("workflows-live-reshard", batches=batches, members=batches * members,
           chain_steps=chains * STEPS, in_flight_when_moved=mover.in_flight,
           move_seconds=mover.seconds)
    assert len(mover.seconds) == 2
    assert mover.in_flight[0] > 0, "the namespace's slot moved with no batch open"
    assert not twice, f"{len(twice)} job(s) ran other than once: {twice[:20]}"
    assert set(callbacks.values()) == {1}, \
        {bid: n for bid, n in callbacks.items() if n != 1}
    assert not early, f"steps started before the step before them finished: {early[:20]}"
    for bid in bids:
        assert (await flow.jobs.app.batch_status(bid)).state == "success"


async def test_batches_and_chains_through_the_death_of_the_namespaces_master(
    own_cluster: ClusterProcess, r: redis.asyncio.Redis, namespace: str, flows: list[Flow]
) -> None:
    """The master serving the batches' keys is SIGKILLed mid-flow; its replica takes
    over. With ``durability="replica"`` every write the relay was told of is on the
    replica: no member's end is lost, every batch ends, each on_complete runs once (its
    enqueue is refused a second time by its marker, in its queue's slot)."""
    batches, members, chains = SIZES
    keys = Keys(namespace)
    slot = own_cluster.slot_of(keys.batches)
    records = own_cluster.port_of_slot(own_cluster.slot_of(clusterapp.finished_key(namespace)))
    if own_cluster.port_of_slot(slot) == records:  # the test's records must survive
        other = next(port for _, port in own_cluster.masters() if port != records)
        await anyio.to_thread.run_sync(own_cluster.move_slot, slot, other)
    victim = own_cluster.port_of_slot(slot)
    queues = [name for names in spread_queues(own_cluster, namespace, avoid=victim).values()
              for name in names]
    tags = [f"b{b}m{m}" for b in range(batches) for m in range(members)] + [
        f"c{c}s{k}" for c in range(chains) for k in range(STEPS)]
    with worker_pool() as workers:
        # An orphan threshold above a failover's few seconds: the processes' beats (in
        # the namespace's slot) stop meanwhile, and none may be taken for dead.
        flow = Flow(own_cluster, r, namespace, queues, workers, durability="replica",
                    orphan_threshold=15.0)
        flows.append(flow)
        for _ in range(3):
            flow.start_worker()
        await flow.wait_ready()
        mover = Mover(own_cluster, r, keys, queues)  # used for its in-flight count only
        bids = await _enqueue(flow.jobs, queues, mover, random.Random(5), (0.2, 0.6))

        async def some_done() -> bool:
            return sum((await flow.finished()).values()) >= len(tags) // 5
        await wait_until(some_done, timeout=120, every=0.05)
        open_at_kill = await r.zcard(keys.batches_open)
        killed_at = time.monotonic()
        own_cluster.kill_master_of_slot(slot)
        new_master = await anyio.to_thread.run_sync(own_cluster.wait_failover, slot)
        await _wait_settled(flow, tags, timeout=180)
        recovered_in = time.monotonic() - killed_at
        died = [w.log()[-3000:] for w in flow.workers if not w.alive()]
        await flow.stop_all()
        started, finished = await flow.started(), await flow.finished()

    callbacks = {bid: finished[f"complete:{bid}"] for bid in bids}
    # A run whose own writes met the cluster down (its records, in another slot) failed
    # and was retried: started twice, finished once. Finished twice is a duplicate.
    retried = [tag for tag in tags if started[tag] > 1]
    twice = [tag for tag in tags if finished[tag] > 1]
    early = await _early_steps(r, namespace)
    states = await _states(flow, bids)
    report("workflows-master-killed", batches=batches, open_at_kill=open_at_kill,
           new_master=new_master, settled_after=round(recovered_in, 1),
           retried_after_failing=len(retried), finished_twice=len(twice))
    assert not died, "a worker died with the master:\n" + "\n".join(died)
    assert open_at_kill > 0, "the master died with no batch open"
    assert set(states) == {"success"}, states
    assert set(callbacks.values()) == {1}, {b: n for b, n in callbacks.items() if n != 1}
    assert not early, f"steps started before the step before them finished: {early[:20]}"
    # Their queues' masters lived and no process was taken for dead: none ran twice.
    assert not twice, f"{len(twice)} job(s) finished twice: {twice[:20]}"
