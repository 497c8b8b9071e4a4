"""A worker SIGKILLed inside a member's batch block (issue 40, defect 1): the block's
hold dies with its process. Recovery gives the member back, its recovered run opens (or
reopens) and fills the batch again, and the relay lets go of the dead block: the dead
run's child batch ends abandoned (its pending member cancelled), and the parent ends —
each callback once."""

from __future__ import annotations

import signal

import pytest

from cogworker_async.redis.part import as_bytes
from cogworker_async.worker.batch_reaper import owner_of
from tests.waiting import wait_until
from tests.workerproc import WorkerProcess, worker_pool
from tests.workflows import batchapp

pytestmark = pytest.mark.timeout(120)

WAIT = 40.0
TARGET_APP = "tests.workflows.batchapp:jobs"


@pytest.mark.parametrize("how", ["child", "reopen"])
async def test_a_block_killed_with_its_process_lets_its_batch_and_parent_end(
    redis_url: str, namespace: str, how: str,
) -> None:
    jobs = batchapp.build(redis_url, namespace)
    app, store = jobs.app, jobs.app._store()
    try:
        async with app.batch("parent", on_complete=jobs.called.s("parent")) as parent:
            await jobs.spawner.enqueue(parent.bid if how == "reopen" else None)
        with worker_pool() as workers:
            workers.append(WorkerProcess(redis_url, namespace, {}, [],
                                         target=TARGET_APP).start())
            async def inside() -> bool:
                return bool(await store.client.exists(batchapp.inside_key(namespace)))
            await wait_until(inside, timeout=WAIT)
            held = await store.batches.held_page(0, 10)
            assert held
            assert all(owner_of(t) for _, holders, _ in held for t in holders.split())
            workers[0].signal(signal.SIGKILL)
            await workers[0].wait_exit(10)
            workers.append(WorkerProcess(redis_url, namespace, {}, [],
                                         target=TARGET_APP).start())

            async def parent_called() -> bool:
                calls = await store.client.lrange(batchapp.calls_key(namespace), 0, -1)
                return f"parent {parent.bid}".encode() in calls
            await wait_until(parent_called, timeout=WAIT)
            calls = [as_bytes(c).decode() for c in
                     await store.client.lrange(batchapp.calls_key(namespace), 0, -1)]
        status = await app.batch_status(parent.bid)
        assert status.state in ("success", "complete"), status
        assert calls.count(f"parent {parent.bid}") == 1
        if how == "child":
            states = sorted([(await app.batch_status(c)).state for c in status.children])
            assert states == ["abandoned", "success"]
            assert [c.split()[0] for c in calls] == ["child", "parent"]
        assert await store.client.zcard(store.keys.batches_held) == 0
    finally:
        await app.close()
