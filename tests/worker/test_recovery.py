"""Liveness and recovery in a live worker: beats, orphans of a dead process, strays,
pending settlements and the shutdown hand-over — on the test server, in this process."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import anyio

from cogworker_async import App
from cogworker_async.redis.store import Store
from tests.waiting import wait_until

DEAD = "deadhost:999:abc"


def raw_job(name: str, n: int, queue: str = "default") -> bytes:
    return json.dumps({"jid": f"j{n}", "class": name, "args": [n], "kwargs": {},
                       "queue": queue, "retry": True, "created_at": 1.0,
                       "enqueued_at": 1.0}).encode()


async def test_the_first_beat_comes_before_the_first_fetch(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    async with jobs.worker() as manager:
        identity = manager.identity
        assert await store.client.exists(store.keys.process(identity)) == 1
        assert await store.client.sismember(store.keys.in_progress_identities, identity)
        info = await store.beat_info(identity)
        assert info is not None
        assert info["pid"] > 0
        assert "lag_ms" in info
    # A clean stop leaves no trace in the registries.
    assert await store.client.exists(store.keys.process(identity)) == 0
    assert not await store.client.sismember(store.keys.in_progress_identities, identity)


async def test_a_dead_processs_jobs_are_recovered_within_the_bound(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(orphan_threshold=1.0, recovery_interval=0.2)
    ran: list[int] = []

    @jobs.job(name="rec")
    async def rec(n: int) -> None:
        ran.append(n)

    # A process that died: its list and registry entry remain, its stamp is old.
    keys = store.keys
    await store.client.rpush(keys.in_progress(DEAD), raw_job("rec", 1), raw_job("rec", 2))
    await store.client.sadd(keys.in_progress_identities, DEAD)
    await store.client.hset(keys.last_beat, DEAD, str(time.time() - 60))
    began = time.monotonic()
    async def forgotten() -> bool:
        return not await store.client.sismember(keys.in_progress_identities, DEAD)

    async with jobs.worker():
        await wait_until(lambda: sorted(ran) == [1, 2], timeout=5)
        # The jobs can run before the pass that requeued them has forgotten the owner.
        await wait_until(forgotten, timeout=5)
    assert time.monotonic() - began < 1.0 + 0.2 + 2
    assert await store.client.exists(keys.in_progress(DEAD)) == 0
    [event] = [json.loads(e) for e in await store.client.lrange(keys.recoveries, 0, -1)]
    assert (event["identity"], event["requeued"]) == (DEAD, 2)


async def test_a_live_process_is_never_recovered(
    make_app: Callable[..., App], store: Store
) -> None:
    # Two workers: each sees the other alive; nothing is requeued while jobs run.
    jobs = make_app(orphan_threshold=1.0, recovery_interval=0.1, heartbeat_interval=0.2)
    started: list[int] = []
    gate = anyio.Event()

    @jobs.job(name="hold")
    async def hold(n: int) -> None:
        started.append(n)
        await gate.wait()

    for n in range(2):
        await hold.enqueue(n)
    async with jobs.worker(concurrency=1), jobs.worker(concurrency=1):
        await wait_until(lambda: len(started) == 2)
        # Several recovery passes and several orphan thresholds' worth of beats.
        with anyio.move_on_after(2.5):
            await wait_until(lambda: len(started) > 2, timeout=10)
        gate.set()
    assert sorted(started) == [0, 1]
    assert await store.client.llen(store.keys.recoveries) == 0


async def test_repeat_orphans_are_buried_as_process_died(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(max_orphanings=2)
    keys = store.keys
    poison = raw_job("never", 7)
    await store.client.set(keys.orphanings("j7"), 2)  # recovered twice already
    await store.client.rpush(keys.in_progress(DEAD), poison)
    await store.client.sadd(keys.in_progress_identities, DEAD)
    await store.client.hset(keys.last_beat, DEAD, str(time.time() - 60))
    await store.client.hset(keys.beats, DEAD, json.dumps({"pid": 999, "rss_bytes": 1}))
    async with jobs.worker():
        await wait_until(lambda: store.client.zcard(keys.dead), timeout=5)
    [entry] = [json.loads(e) for e in await store.client.zrange(keys.dead, 0, -1)]
    assert entry["jid"] == "j7"
    assert entry["error_class"] == "ProcessDied"
    assert entry["orphaned_from"] == DEAD
    assert entry["orphaned_process"]["pid"] == 999
    assert await store.client.llen(keys.repeat_orphans) == 0
    assert await store.client.exists(keys.orphanings("j7")) == 0
    assert int(await store.client.get(keys.stats_failed) or 0) == 1


async def test_a_stray_on_the_own_list_is_requeued_and_run_once(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(recovery_interval=0.1)
    ran: list[int] = []

    @jobs.job(name="stray")
    async def stray(n: int) -> None:
        ran.append(n)

    async with jobs.worker() as manager:
        # A ghost: on our list (a lost fetch reply), run by nobody.
        await store.client.lpush(store.keys.in_progress(manager.identity), raw_job("stray", 5))
        await wait_until(lambda: ran == [5], timeout=5)
    assert ran == [5]


async def test_handed_over_failures_are_filed_not_rerun(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    keys = store.keys
    record = json.dumps({"set": "dead", "delay": 0,
                         "payload": raw_job("x", 3).decode()}).encode()
    await store.client.rpush(keys.unsettled, record, b"not a record")
    async with jobs.worker():
        await wait_until(lambda: _zcard_is(store, keys.dead, 2), timeout=5)
    entries = [json.loads(e) for e in await store.client.zrange(keys.dead, 0, -1)]
    assert {e.get("jid") for e in entries} >= {"j3"}
    assert any(e.get("error_class") == "UnparseablePayload" for e in entries)
    assert await store.client.llen(keys.unsettled) == 0


async def _zcard_is(store: Store, key: str, n: int) -> bool:
    return int(await store.client.zcard(key)) == n


async def test_recovered_jobs_wake_an_idle_worker(
    make_app: Callable[..., App], store: Store
) -> None:
    # The idle poll is 30 s: only the wake-up published by the requeue can be this fast.
    jobs = make_app(orphan_threshold=1.0, recovery_interval=0.2, idle_fetch_interval=30.0)
    ran = anyio.Event()

    @jobs.job(name="woken")
    async def woken(n: int) -> None:
        ran.set()

    keys = store.keys
    async with jobs.worker():
        await anyio.sleep(0.3)  # setup: let the dispatcher go idle on an empty queue
        await store.client.rpush(keys.in_progress(DEAD), raw_job("woken", 9))
        await store.client.sadd(keys.in_progress_identities, DEAD)
        await store.client.hset(keys.last_beat, DEAD, str(time.time() - 60))
        with anyio.fail_after(5):
            await ran.wait()
