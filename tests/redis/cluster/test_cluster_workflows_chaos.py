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
    if not await flow.quiescent(tags):
        return False
    keys = flow.keys
    for queue in flow.queues:
        if await flow.r.zcard(keys.waiting(queue)) or await flow.r.llen(keys.batch_notes(queue)):
            return False
    return not await flow.r.zcard(keys.batches_firing)


async def test_batches_and_chains_through_live_reshards_of_their_slots(
    own_cluster: ClusterProcess, r: redis.asyncio.Redis, namespace: str, flows: list[Flow]
) -> None:
    batches, members, chains = SIZES
    keys = Keys(namespace)
    spread = spread_queues(own_cluster, namespace)
    queues = [name for names in spread.values() for name in names]
    rng = random.Random(11)
    with worker_pool() as workers:
        flow = Flow(own_cluster, r, namespace, queues, workers)
        flows.append(flow)
        for _ in range(2):
            flow.start_worker()
        await flow.wait_ready()
        jobs = flow.jobs
        bids: list[str] = []
        member_tags = [f"b{b}m{m}" for b in range(batches) for m in range(members)]
        step_tags = [f"c{c}s{k}" for c in range(chains) for k in range(STEPS)]
        waiting_queue = queues[0]  # steps wait on it when its slot moves
        moves: list[float] = []
        in_flight: list[int] = []
        halfway = anyio.Event()

        async def move(slot: int) -> None:
            target = next(port for _, port in own_cluster.masters()
                          if port != own_cluster.port_of_slot(slot))
            in_flight.append(await r.zcard(keys.batches_open)
                             + sum([await r.zcard(keys.waiting(q)) for q in queues]))
            moved_at = time.monotonic()
            await anyio.to_thread.run_sync(own_cluster.move_slot, slot, target)
            moves.append(round(time.monotonic() - moved_at, 2))
            assert own_cluster.port_of_slot(slot) == target

        async def mover() -> None:
            await halfway.wait()  # while batches are open and members pending
            await move(own_cluster.slot_of(keys.batches))
            await move(own_cluster.slot_of(keys.queue(waiting_queue)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(mover)
            for b in range(batches):
                if b == batches // 3:
                    halfway.set()
                async with jobs.app.batch(on_complete=jobs.callback.s("complete")) as batch:
                    for m in range(members):
                        await jobs.work.options(queue=queues[(b + m) % len(queues)]).enqueue(
                            f"b{b}m{m}", round(rng.uniform(0.01, 0.05), 3))
                bids.append(batch.bid)
            for c in range(chains):
                await jobs.app.chain(*[
                    jobs.node.options(queue=queues[(c + k) % len(queues)]).s(
                        f"c{c}s{k}", round(rng.uniform(0.05, 0.2), 3)) for k in range(STEPS)
                ]).enqueue()

        tags = member_tags + step_tags
        await wait_until(lambda: _settled(flow, tags), timeout=240, every=0.2)
        for worker in flow.workers:
            assert worker.alive(), worker.log()
        await flow.stop_all()
        started = await flow.started()
        events = [entry.decode().split(" ", 1)
                  for entry in await r.lrange(clusterapp.events_key(namespace), 0, -1)]

    first_start: dict[str, int] = {}
    last_finish: dict[str, int] = {}
    for index, (kind, tag) in enumerate(events):
        if kind == "S":
            first_start.setdefault(tag, index)
        else:
            last_finish[tag] = index
    twice = [tag for tag in tags if started[tag] != 1]
    callbacks = {bid: started[f"complete:{bid}"] for bid in bids}
    early = [f"c{c}s{k}" for c in range(chains) for k in range(1, STEPS)
             if first_start[f"c{c}s{k}"] < last_finish[f"c{c}s{k - 1}"]]
    report("workflows-live-reshard", batches=batches, members=len(member_tags),
           chain_steps=len(step_tags), in_flight_when_moved=in_flight, move_seconds=moves)
    assert len(moves) == 2
    assert in_flight[0] > 0, "the namespace's slot moved with no batch open"
    assert not twice, f"{len(twice)} job(s) ran other than once: {twice[:20]}"
    assert set(callbacks.values()) == {1}, \
        {bid: n for bid, n in callbacks.items() if n != 1}
    assert not early, f"steps started before the step before them finished: {early[:20]}"
    for bid in bids:
        assert (await jobs.app.batch_status(bid)).state == "success"
