"""A batch block in a process that is not a worker (issue 40, defect 1's rest): its hold
is a lease (``jobs.batch(..., hold=seconds)``, renewed by its open and each member it
adds), so an enqueuer SIGKILLed inside its block holds its batch — and the batch's
parent — for at most ``hold`` and a relay pass: the batch it opened ends abandoned (its
pending members cancelled, no callback), one it reopened is sealed and ends as its
members do; the parent ends, each callback once. A live block that outlives its lease
is told at its next add (or at its exit): ``HoldLapsed``, never work dropped silently.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import time
from typing import Any

import anyio
import pytest

from cogworker_async import App
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.redis.batches import HoldLapsed
from cogworker_async.redis.part import as_bytes
from cogworker_async.workflows.batch import HOLD
from tests.clients import async_client
from tests.waiting import wait_until
from tests.workerproc import ROOT, WorkerProcess, worker_pool
from tests.workflows import batchapp

pytestmark = pytest.mark.timeout(120)

SHORT_HOLD = 2.0
TARGET_APP = "tests.workflows.batchapp:jobs"
BOUND = SHORT_HOLD + 15.0
"""From the kill: the lease, a worker's start (the worker is started after the kill, so
that a parent cannot end before its child is opened), a relay pass, a loaded machine."""


async def enqueuer(url: str, namespace: str, how: str, bid: str) -> None:
    """Not a worker: opens a batch (a child of ``bid``, ``bid`` itself reopened, or one
    of its own) with a short hold, adds a member that runs and one that waits an hour,
    says so ("<bid>" at ``inside_key``) and hangs inside the block: killed there."""
    jobs = batchapp.build(url, namespace)
    block = (jobs.app.batch(bid=bid, hold=SHORT_HOLD) if how == "reopen" else
             jobs.app.batch("child", parent=bid or None, hold=SHORT_HOLD,
                            on_complete=jobs.called.s("child")))
    async with block as batch:
        await leaf(jobs.app).enqueue(2)
        if how != "reopen":
            await leaf(jobs.app).enqueue_in(3600, 3)
        client = async_client(url)
        await client.rpush(batchapp.inside_key(namespace), batch.bid)
        await client.aclose()
        await anyio.sleep(3600)  # killed here


def start_enqueuer(url: str, namespace: str, how: str, bid: str) -> subprocess.Popen[bytes]:
    code = ("import sys, anyio; from tests.workflows.test_batch_lease import enqueuer; "
            "anyio.run(enqueuer, *sys.argv[1:])")
    return subprocess.Popen([sys.executable, "-c", code, url, namespace, how, bid], cwd=ROOT)


def leaf(app: App) -> JobFunction[..., Any]:
    """batchapp's member job (it keeps no handle on it): registered again, the same."""
    return app.job(name="leaf", retry=0)(app.registry["leaf"].func)


async def calls(app: App, namespace: str) -> list[str]:
    client = app._store().client
    return [as_bytes(c).decode() for c in
            await client.lrange(batchapp.calls_key(namespace), 0, -1)]


@pytest.mark.parametrize("how", ["child", "own", "reopen"])
async def test_an_enqueuer_killed_inside_its_block_lets_its_batch_end_within_the_bound(
    redis_url: str, namespace: str, how: str,
) -> None:
    jobs = batchapp.build(redis_url, namespace)
    app, store = jobs.app, jobs.app._store()
    process: subprocess.Popen[bytes] | None = None
    try:
        bid = ""
        if how != "own":  # no worker yet: its member waits, so it cannot end early
            async with app.batch("outer", on_complete=jobs.called.s("outer")) as outer:
                await leaf(app).enqueue(1)
            bid = outer.bid
        process = start_enqueuer(redis_url, namespace, how, bid)
        inside = batchapp.inside_key(namespace)

        async def said() -> bool:
            return bool(await store.client.llen(inside))
        await wait_until(said, timeout=30)
        held = as_bytes(await store.client.lindex(inside, 0) or b"").decode()
        assert (await app.batch_status(held)).state == "open"
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        killed = time.monotonic()
        with worker_pool() as workers:
            workers.append(WorkerProcess(redis_url, namespace, {}, [],
                                         target=TARGET_APP).start())
            final = ("success", "complete", "dead", "abandoned")

            async def ended() -> bool:
                statuses = [await app.batch_status(b) for b in {held, bid} - {""}]
                return all(s.state in final for s in statuses)
            await wait_until(ended, timeout=BOUND, every=0.1)
            assert time.monotonic() - killed < BOUND

            async def called() -> bool:  # the callbacks due, enqueued and run
                return how == "own" or f"outer {bid}" in await calls(app, namespace)
            await wait_until(called, timeout=BOUND)
            status = await app.batch_status(held)
            if how != "reopen":
                async def cancelled() -> bool:  # its member waiting an hour
                    return (await app.batch_status(held)).cancelled == 1
                await wait_until(cancelled, timeout=BOUND)
            seen = await calls(app, namespace)
        if how == "reopen":  # sealed: its members ran, its callback once
            assert (status.state, status.total, status.succeeded) == ("success", 2, 2)
            assert seen == [f"outer {bid}"]
        else:  # opened by the dead block: abandoned, no callback of its own
            assert status.state == "abandoned"
            assert not any(c.startswith("child") for c in seen)
            assert seen == ([f"outer {bid}"] if how == "child" else [])
        if how == "child":
            assert (await app.batch_status(bid)).state == "success"
        assert await store.client.zcard(store.keys.batches_held) == 0
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        await app.close()


async def test_a_live_block_that_outlives_its_lease_is_told_loudly(
    redis_url: str, namespace: str,
) -> None:
    jobs = batchapp.build(redis_url, namespace)
    app = jobs.app
    member = leaf(app)
    try:
        with worker_pool() as workers:
            workers.append(WorkerProcess(redis_url, namespace, {}, [],
                                         target=TARGET_APP).start())
            bids: list[str] = []

            async def outlive(last: str) -> None:
                async with app.batch(hold=0.5, on_complete=jobs.called.s(last)) as b:
                    bids.append(b.bid)
                    await member.enqueue(1)

                    async def let_go() -> bool:
                        return (await app.batch_status(b.bid)).state == "abandoned"
                    await wait_until(let_go, timeout=30)
                    if last == "add":
                        await member.enqueue(2)

            for last in ("add", "exit"):
                with pytest.raises(HoldLapsed, match="hold"):
                    await outlive(last)
                status = await app.batch_status(bids[-1])
                assert (status.state, status.total) == ("abandoned", 1)
        assert await calls(app, namespace) == []
    finally:
        await app.close()


async def test_the_hold_is_checked_and_the_fake_takes_it() -> None:
    app = App("redis://127.0.0.1:1/0", namespace="fake")  # never reached

    @app.job()
    async def work(n: int) -> int:
        return n

    for bad in (0, -1.0, math.nan, math.inf, 31 * 86400):
        with pytest.raises(ValueError, match="hold"):
            app.batch(hold=bad)
    for wrong in ("5", True):
        with pytest.raises(TypeError, match="hold"):
            app.batch(hold=wrong)  # type: ignore[arg-type]
    assert HOLD == 600.0
    with app.testing.fake() as testing:
        async with app.batch(hold=0.001) as batch:
            await work.enqueue(1)
        await testing.drain()
        assert (await app.batch_status(batch.bid)).state == "success"
