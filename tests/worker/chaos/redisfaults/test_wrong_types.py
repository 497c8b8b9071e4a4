"""Scenario 8 (R11): keys of the wrong type planted while workers run.

Planted, with two workers A and B running (both work queues ``bad`` then ``default``):
- queue ``bad``'s list as a hash;
- B's own in-progress list for ``default`` as a string (fetch.lua refuses it with a
  WRONGTYPE error: B can fetch nothing while it stays, and must neither crash nor spin);
- a fake dead identity registered in ``default``'s registry of identities (and the
  namespace's) with a real list of jobs there, and a ``last_beat`` stamp "abc" in that
  slot and the namespace's (a non-numeric stamp counts as none: its jobs are recovered);
- ``workers:<identity>`` as a list, for A and for the fake identity;
- ``declared_dead`` as a string, in ``default``'s slot (where recovery writes it) and in
  the namespace's.

Then: no worker exits, the server sees no hot loop (commands over a 2 s window stay
bounded, as does the workers' CPU), nothing is lost (the jobs on ``default`` and the
fake identity's jobs each run exactly once), and the foreign keys are left exactly as
planted. ``workers:<identity>`` is not foreign: it is derived state owned by its
process (a beat replaces it, forgetting a dead identity deletes it), so it is expected
to be replaced, and checked for that.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import redis.asyncio

from cogworker_async.jobs import wire
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.worker.chaos.redisfaults.conftest import (
    FULL,
    StartWorker,
    Witness,
    forgotten,
    leftovers,
    log_count,
    report,
    size,
    wait_alive,
    wait_ready,
)
from tests.worker.chaos.redisfaults.faultapp import Jobs
from tests.workerproc import WorkerProcess

pytestmark = pytest.mark.timeout(180 if FULL else 60)

WINDOW = 2.0
COMMANDS_BOUND = 3000
"""Commands over WINDOW seconds for two workers: idle upkeep is a few hundred; a hot
loop on a bad key would be tens of thousands."""
CPU_BOUND = 0.5
"""Fraction of one core a worker may use over WINDOW while stuck on bad keys."""

FAKE = "fault-8-dead"


def raw_job(tag: str) -> bytes:
    payload = wire.build("record", [tag], {}, queue="default", retry=True, now=time.time())
    return wire.encode(payload, 1 << 20)


async def key_state(r: redis.asyncio.Redis, key: str) -> tuple[str, Any]:
    """A key's type and content."""
    kind = as_bytes(await r.type(key)).decode()
    if kind == "string":
        return kind, await r.get(key)
    if kind == "hash":
        return kind, await r.hgetall(key)
    if kind == "list":
        return kind, await r.lrange(key, 0, -1)
    if kind == "set":
        return kind, await r.smembers(key)
    return kind, None


async def commands_over(r: redis.asyncio.Redis, workers: list[WorkerProcess],
                        seconds: float) -> tuple[int, dict[int, float]]:
    """Commands the server processed, and each worker's CPU share, over ``seconds``."""
    tick = os.sysconf("SC_CLK_TCK")
    first = int((await r.info("stats"))["total_commands_processed"])
    cpu = {w.pid: _cpu_ticks(w.pid) for w in workers}
    began = time.monotonic()
    await anyio.sleep(seconds)  # the measured window itself, not a wait for a state
    elapsed = time.monotonic() - began
    last = int((await r.info("stats"))["total_commands_processed"])
    shares = {w.pid: round((_cpu_ticks(w.pid) - cpu[w.pid]) / tick / elapsed, 3)
              for w in workers}
    return last - first - 1, shares  # minus our own first INFO


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


async def test_wrong_type_keys_planted_while_workers_run(
    servers: Callable[..., ServerProcess], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    server = servers()
    r, jobs, keys = clients(server.url), make_jobs(server.url), Keys(namespace)
    queues = ("--queue", "bad", "--queue", "default")
    a = start_worker(server.url, *queues, "--concurrency", "4", identity="fault-8-a")
    b = start_worker(server.url, *queues, "--concurrency", "4", identity="fault-8-b")
    workers = [a, b]
    await wait_ready(r, namespace, a, b)
    baseline, baseline_cpu = await commands_over(r, workers, WINDOW)

    # B is idle: its list does not exist, so SET NX never overwrites a job of B's.
    b_list = keys.in_progress("default", "fault-8-b")
    await wait_until(lambda: _planted(r, b_list), timeout=5)
    await r.hset(keys.queue("bad"), mapping={"planted": "not a list"})
    declared_dead = (keys.queue_declared_dead("default"), keys.declared_dead)
    for key in declared_dead:
        await r.set(key, "planted: not a set")
    await r.rpush(keys.workers("fault-8-a"), "planted", "not a hash")
    await r.rpush(keys.workers(FAKE), "planted", "not a hash")
    foreign = {key: await key_state(r, key)
               for key in (b_list, keys.queue("bad"), *declared_dead)}

    fake_tags = [f"orphan-{i}" for i in range(3)]
    await r.rpush(keys.in_progress("default", FAKE), *(raw_job(tag) for tag in fake_tags))
    for stamps in (keys.queue_last_beat("default"), keys.last_beat):
        await r.hset(stamps, FAKE, "abc")
    for registry in (keys.queue_identities("default"), keys.processes):
        await r.sadd(registry, FAKE)

    good = [f"good-{i}" for i in range(size(50, 1000))]
    await jobs.record.enqueue_many([((tag,), {}) for tag in good])
    total = len(good) + len(fake_tags)

    async def all_ran() -> bool:
        assert b.alive(), f"worker B exited:\n{b.log()}"
        return await witness.finished() == total and not any(
            (await leftovers(r, namespace)).values())

    began = time.monotonic()
    await wait_alive(a, all_ran, timeout=30)
    drained_in = time.monotonic() - began
    await wait_until(lambda: _forgotten(r, keys, FAKE), timeout=10)

    stuck, stuck_cpu = await commands_over(r, workers, WINDOW)
    assert a.alive()
    assert b.alive()

    starts = await witness.starts()
    errors = {name: {"fetch_failed": log_count(w, "fetch failed"),
                     "reconcile_failed": log_count(w, "reconcile pass failed"),
                     "recovery_skipped": log_count(w, "orphan recovery skipped"),
                     "bad_queue_warnings": log_count(w, "is not a list in Redis")}
              for name, w in (("a", a), ("b", b))}
    after = {key: await key_state(r, key) for key in foreign}
    report("8-wrong-types", jobs=total, lost=total - await witness.finished(),
           duplicate_runs=sum(n - 1 for n in starts.values()),
           commands_per_window={"baseline": baseline, "planted": stuck},
           cpu_share={"baseline": baseline_cpu, "planted": stuck_cpu},
           seconds_to_drain=round(drained_in, 2), log_lines=errors)

    assert starts == dict.fromkeys(good + fake_tags, 1)  # nothing lost, nothing twice
    assert stuck < COMMANDS_BOUND, stuck
    assert all(share < CPU_BOUND for share in stuck_cpu.values()), stuck_cpu
    assert after == foreign  # the foreign keys: same type, same content
    # Derived state, owned by its process: A's beat replaced its workers "hash" (empty
    # while idle: deleted); forgetting the dead identity deleted its one.
    assert as_bytes(await r.type(keys.workers("fault-8-a"))).decode() in ("hash", "none")
    assert await r.exists(keys.workers(FAKE)) == 0
    assert errors["a"]["bad_queue_warnings"] == 1
    assert errors["b"]["bad_queue_warnings"] <= 1

    # B's list of the wrong type is no recovery problem while B is alive: A's passes
    # ask the script (which finds B alive) instead of failing on the list's length.
    assert errors["a"]["recovery_skipped"] == 0
    # The fake identity was forgotten cleanly (declared_dead is best effort in forget.lua).
    assert log_count(a, f"orphan recovery skipped {FAKE}") == 0
    assert log_count(b, f"orphan recovery skipped {FAKE}") == 0

    for worker in workers:
        await worker.stop()
    assert {key: await key_state(r, key) for key in foreign} == foreign
    assert log_count(a, "couldn't deregister") == 0  # A's own list is fine: it left
    # B's list is unreadable: it is not taken for empty, B stays registered (in that
    # queue's registry, and so in the namespace's).
    assert await r.sismember(keys.queue_identities("default"), "fault-8-b")
    assert await r.sismember(keys.processes, "fault-8-b")


async def _planted(r: redis.asyncio.Redis, key: str) -> bool:
    return bool(await r.set(key, "planted: not a list", nx=True))


async def _forgotten(r: redis.asyncio.Redis, keys: Keys, identity: str) -> bool:
    return (await forgotten(r, keys.namespace, identity)
            and not await r.hexists(keys.queue_last_beat("default"), identity)
            and not await r.hexists(keys.last_beat, identity))
