"""Scenario 2: a worker SIGKILLed inside the settle window.

(a) The job's body has finished, its ack is not written yet (the job SIGKILLs its own
    process as its very last statement): recovery brings it back — it may run again,
    it is never lost.
(b) Just after the ack: the test watches the in-progress list's keyspace events and
    SIGKILLs the worker the moment the job's ``lrem`` arrives. The job whose success was
    recorded never runs again; the jobs still running at the kill are recovered.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

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
    leftovers,
    report,
    size,
    wait_alive,
    wait_ready,
)
from tests.worker.chaos.redisfaults.faultapp import Jobs

pytestmark = pytest.mark.timeout(180 if FULL else 60)

RECOVERY_BOUND = SETTINGS["orphan_threshold"] + SETTINGS["recovery_interval"] + 2.0
"""docs/design.md, rule 4: a dead process's jobs are back within threshold + interval + 2 s."""


async def test_killed_after_the_body_before_the_ack(
    servers: Callable[..., ServerProcess], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    server = servers()
    r, jobs, keys = clients(server.url), make_jobs(server.url), Keys(namespace)
    others = [f"other-{i}" for i in range(size(20, 400))]
    workers = [start_worker(server.url, "--concurrency", "4", identity=f"fault-2a-{i}")
               for i in range(2)]
    await wait_ready(r, namespace, *workers)

    half = len(others) // 2
    await jobs.record.enqueue_many([((tag,), {}) for tag in others[:half]])
    await jobs.die_after.enqueue("doomed")
    await jobs.record.enqueue_many([((tag,), {}) for tag in others[half:]])

    # One worker runs "doomed" and dies by its hand; the other goes on and recovers.
    await wait_until(lambda: any(not w.alive() for w in workers), timeout=20)
    dead = next(w for w in workers if not w.alive())
    survivor = next(w for w in workers if w is not dead)
    assert await dead.wait_exit(5) == -signal.SIGKILL
    dead_identity = f"fault-2a-{workers.index(dead)}"

    async def done_and_rerun() -> bool:  # the doomed job's second run included
        return (await _all_done(r, keys, witness, len(others) + 1, dead_identity)
                and (await witness.starts())["doomed"] >= 2)

    await wait_alive(survivor, done_and_rerun, timeout=30)
    await survivor.stop()

    started = await witness.started()
    doomed_starts = [e for e in started if e["tag"] == "doomed"]
    doomed_runs = [e for e in await witness.ran() if e["tag"] == "doomed"]
    starts = await witness.starts()
    lost = sorted(set(others) - {e["tag"] for e in await witness.ran()})
    killed_at = doomed_runs[0]["t"]  # its last record, just before the SIGKILL
    recovered_in = doomed_starts[1]["t"] - killed_at if len(doomed_starts) > 1 else None
    duplicates = {tag: n for tag, n in starts.items() if n > 1 and tag != "doomed"}
    report("2a-kill-before-ack", jobs=len(others) + 1, lost=len(lost),
           doomed_runs=len(doomed_starts), other_duplicate_runs=sum(duplicates.values())
           - len(duplicates), seconds_to_recover=recovered_in, bound=RECOVERY_BOUND)

    assert lost == []
    # It finished but was never acked: it runs again (its second run behaves), once.
    assert len(doomed_starts) == 2
    assert len(doomed_runs) == 2
    assert doomed_starts[0]["pid"] == dead.pid
    assert doomed_starts[1]["pid"] == survivor.pid
    assert recovered_in is not None
    assert recovered_in <= RECOVERY_BOUND
    # Only the jobs the dead worker was running at the kill may run twice.
    assert all(tag in others for tag in duplicates)
    assert all(next(e["pid"] for e in started if e["tag"] == tag) == dead.pid
               for tag in duplicates)
    assert len(duplicates) <= 3, duplicates  # concurrency 4, one slot was "doomed"
    assert not any((await leftovers(r, namespace)).values())


async def _all_done(r: redis.asyncio.Redis, keys: Keys, witness: Witness, total: int,
                    dead_identity: str) -> bool:
    return (await witness.finished() == total
            and not any((await leftovers(r, keys.namespace)).values())
            and await forgotten(r, keys.namespace, dead_identity))


async def test_killed_just_after_the_ack(
    servers: Callable[..., ServerProcess], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    server = servers()
    r, jobs, keys = clients(server.url), make_jobs(server.url), Keys(namespace)
    await r.config_set("notify-keyspace-events", "Kl")
    identity = "fault-2b-first"
    first = start_worker(server.url, "--concurrency", "4", identity=identity)
    await wait_ready(r, namespace, first)

    # Three jobs keep running (waiting for the gate) on the first worker...
    holders = [f"held-{i}" for i in range(3)]
    await jobs.held.enqueue_many([((tag,), {}) for tag in holders])
    await wait_alive(first, lambda: _started(witness, holders), timeout=10)

    # ... while one quick job runs and is acked: SIGKILL on its ack's LREM.
    pubsub = r.pubsub()
    await pubsub.subscribe(f"__keyspace@0__:{keys.in_progress('default', identity)}")
    try:
        await _subscribed(pubsub)
        await jobs.record.enqueue("acked")
        with anyio.fail_after(10):
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True,
                                                   timeout=1.0)
                if message is not None and message["data"] == b"lrem":
                    first.signal(signal.SIGKILL)
                    killed_at = time.time()
                    break
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    assert await first.wait_exit(5) == -signal.SIGKILL

    # The ack is in Redis: "acked" is off the list; the running ones are still on it.
    listed = set(await r.lrange(keys.in_progress("default", identity), 0, -1))
    assert len(listed) == 3
    assert all(b'"held"' in raw for raw in listed)
    assert await witness.starts() == {**dict.fromkeys(holders, 1), "acked": 1}

    await witness.open_gate()
    second = start_worker(server.url, "--concurrency", "4")
    await wait_alive(second, lambda: _all_done(r, keys, witness, 4, identity), timeout=30)
    recovered_in = min(e["t"] for e in await witness.started()
                       if e["pid"] == second.pid) - killed_at
    await second.stop()

    starts = await witness.starts()
    ran_tags = {e["tag"] for e in await witness.ran()}
    report("2b-kill-after-ack", jobs=4, lost=4 - len(ran_tags),
           acked_job_runs=starts["acked"],
           duplicate_runs=sum(n - 1 for n in starts.values()),
           seconds_to_recover=recovered_in)
    assert starts["acked"] == 1, "a job whose success was recorded ran again"
    assert starts == {**dict.fromkeys(holders, 2), "acked": 1}  # in flight: re-run
    assert ran_tags == {*holders, "acked"}
    assert not any((await leftovers(r, namespace)).values())


async def _started(witness: Witness, tags: list[str]) -> bool:
    starts = await witness.starts()
    return all(starts[tag] for tag in tags)


async def _subscribed(pubsub: redis.asyncio.client.PubSub) -> None:
    with anyio.fail_after(5):
        while True:
            message = await pubsub.get_message(timeout=1.0)
            if message is not None and message["type"] == "subscribe":
                return
