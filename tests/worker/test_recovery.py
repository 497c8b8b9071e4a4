"""Liveness and recovery in a live worker: beats, orphans of a dead process, strays,
pending settlements and the shutdown hand-over — on the test server, in this process
(and one worker subprocess, SIGKILLed).

A process has an in-progress list, a beat and a registration in the slot of each queue
it serves, besides its registration in the namespace's slot: a dead process's jobs come
back from each of those slots, each onto its own queue."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import anyio

from cogworker_async import App
from cogworker_async.redis.beats import ALIVE, BeatWriter
from cogworker_async.redis.store import Store
from cogworker_async.worker.recovery import Recovery
from tests.waiting import wait_until
from tests.worker.e2e import jobsapp
from tests.workerproc import WorkerProcess, worker_pool

DEAD = "deadhost:999:abc"
LONG_AGO = 60.0
"""Seconds since a planted dead process's last beat: far past any orphan threshold."""
SHORT_TTL = 0.2
"""Seconds the alive marker of a process that stops beating outlives its last beat."""
SUBPROCESS_TIMEOUT = 20.0
"""Seconds a worker subprocess may take to start and fetch (imports on 2 busy cores)."""


def raw_job(name: str, n: int, queue: str = "default") -> bytes:
    return json.dumps({"jid": f"j{n}", "class": name, "args": [n], "kwargs": {},
                       "queue": queue, "retry": True, "created_at": 1.0,
                       "enqueued_at": 1.0}).encode()


async def plant_dead(store: Store, lists: dict[str, list[bytes]], identity: str = DEAD
                     ) -> None:
    """What a process that died long ago leaves: its in-progress list in each queue's
    slot (``lists``: queue -> its jobs there), its registrations in the namespace's slot
    and in each queue's, and beats of ``LONG_AGO`` everywhere."""
    keys, stamp = store.keys, str(time.time() - LONG_AGO)
    await store.register_queues(list(lists))
    await store.client.sadd(keys.processes, identity)
    await store.client.hset(keys.last_beat, identity, stamp)
    for queue, raws in lists.items():
        if raws:
            await store.client.rpush(keys.in_progress(queue, identity), *raws)
        await store.client.sadd(keys.queue_identities(queue), identity)
        await store.client.hset(keys.queue_last_beat(queue), identity, stamp)


async def registered_anywhere(store: Store, identity: str, queues: list[str]) -> bool:
    """Whether ``identity`` is in the namespace's registry or in one of ``queues``'."""
    if await store.client.sismember(store.keys.processes, identity):
        return True
    for queue in queues:
        if await store.client.sismember(store.keys.queue_identities(queue), identity):
            return True
    return False


async def lists_left(store: Store) -> list[str]:
    """Every in-progress list of the namespace (every queue, every process)."""
    return [key.decode() async for key in
            store.client.scan_iter(match=store.keys.in_progress_pattern)]


async def queued(store: Store, queue: str) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in await store.client.lrange(store.keys.queue(queue), 0, -1)]


async def test_the_first_beat_comes_before_the_first_fetch(
    make_app: Callable[..., App], store: Store
) -> None:
    queues = ["default", "mail"]
    jobs = make_app(queues=queues)
    async with jobs.worker() as manager:
        identity = manager.identity
        assert await store.client.exists(store.keys.process(identity)) == 1
        assert await store.client.sismember(store.keys.processes, identity)
        # Its queues are registered, and it beats in each one's slot (where recovery
        # judges its list there).
        assert set(queues) <= set(await store.queue_names())
        for queue in queues:
            assert await store.client.exists(store.keys.queue_process(queue, identity)) == 1
            assert await store.client.sismember(store.keys.queue_identities(queue), identity)
        info = await store.beat_info(identity)
        assert info is not None
        assert info["pid"] > 0
        assert "lag_ms" in info
    # A clean stop leaves no trace in the registries, of any slot.
    assert await store.client.exists(store.keys.process(identity)) == 0
    assert not await registered_anywhere(store, identity, queues)
    for queue in queues:
        assert await store.client.exists(store.keys.queue_process(queue, identity)) == 0


async def test_a_dead_processs_jobs_are_recovered_within_the_bound(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(orphan_threshold=1.0, recovery_interval=0.2)
    ran: list[int] = []

    @jobs.job(name="rec")
    async def rec(n: int) -> None:
        ran.append(n)

    # A process that died: its list and registry entries remain, its stamps are old.
    keys = store.keys
    await plant_dead(store, {"default": [raw_job("rec", 1), raw_job("rec", 2)]})
    began = time.monotonic()

    async def forgotten() -> bool:
        return not await registered_anywhere(store, DEAD, ["default"])

    async with jobs.worker():
        await wait_until(lambda: sorted(ran) == [1, 2], timeout=5)
        # The jobs can run before the pass that requeued them has forgotten the owner.
        await wait_until(forgotten, timeout=5)
    assert time.monotonic() - began < 1.0 + 0.2 + 2
    assert await store.client.exists(keys.in_progress("default", DEAD)) == 0
    [event] = [json.loads(e) for e in await store.client.lrange(keys.recoveries, 0, -1)]
    assert (event["identity"], event["requeued"]) == (DEAD, 2)


async def test_a_process_on_two_queues_whose_beats_stop_gets_both_queues_recovered(
    make_app: Callable[..., App], store: Store, redis_url: str
) -> None:
    """It beat (the real beat) and fetched from two queues, then stopped beating. The
    observer serves neither queue: it finds them in the registry of queue names, and
    each job goes back onto the queue it came from."""
    mail, reports = raw_job("m", 1, queue="mail"), raw_job("r", 2, queue="reports")
    writer = BeatWriter(redis_url, store.keys, DEAD, ["mail", "reports"])
    try:
        beaten = await anyio.to_thread.run_sync(
            lambda: writer.beat({"pid": 999}, SHORT_TTL, first=True))
    finally:
        writer.close()
    assert beaten == ALIVE
    await store.enqueue("mail", [mail])
    await store.enqueue("reports", [reports])
    fetched = await store.fetch(DEAD, ["mail", "reports"], 10)
    assert sorted(fetched.jobs) == [("mail", mail), ("reports", reports)]
    # From here on nobody beats for DEAD.

    jobs = make_app(queues=["default"], orphan_threshold=1.0, recovery_interval=0.2)

    async def both_back() -> bool:
        return (await store.client.lrange(store.keys.queue("mail"), 0, -1) == [mail]
                and await store.client.lrange(store.keys.queue("reports"), 0, -1) == [reports])

    async with jobs.worker():
        await wait_until(both_back, timeout=10)
        await wait_until(lambda: _forgotten(store, DEAD, ["mail", "reports"]), timeout=5)
    assert await lists_left(store) == []
    [event] = [json.loads(e) for e in await store.client.lrange(store.keys.recoveries, 0, -1)]
    assert (event["identity"], event["requeued"]) == (DEAD, 2)
    assert event["last_beat"]["pid"] == 999


async def test_a_sigkilled_worker_on_two_queues_gets_both_queues_recovered(
    make_app: Callable[..., App], store: Store, redis_url: str, namespace: str
) -> None:
    """The real thing: a worker process serving two queues, each running a job, is
    SIGKILLed; an observer serving neither queue puts each job back on its own queue."""
    client = jobsapp.build(redis_url, namespace)
    try:
        await client.sleepy.options(queue="mail").enqueue("in-mail", 60.0)
        await client.sleepy.options(queue="reports").enqueue("in-reports", 60.0)
    finally:
        await client.app.close()
    with worker_pool() as workers:
        victim = WorkerProcess(redis_url, namespace, {},
                               ["-q", "mail", "-q", "reports", "--concurrency", "2"])
        workers.append(victim.start())

        async def both_running() -> bool:
            assert victim.alive(), victim.log()
            tags = await store.client.lrange(jobsapp.started_key(namespace), 0, -1)
            return sorted(tags) == [b"in-mail", b"in-reports"]

        await wait_until(both_running, timeout=SUBPROCESS_TIMEOUT)
        assert len(await lists_left(store)) == 2  # one list in each queue's slot
        victim.kill()

    jobs = make_app(queues=["default"], orphan_threshold=1.0, recovery_interval=0.2)

    async def both_back() -> bool:
        mail, reports = await queued(store, "mail"), await queued(store, "reports")
        return ([(e["queue"], e["args"]) for e in mail] == [("mail", ["in-mail", 60.0])]
                and [(e["queue"], e["args"]) for e in reports]
                == [("reports", ["in-reports", 60.0])])

    async with jobs.worker():
        await wait_until(both_back, timeout=10)
    assert await lists_left(store) == []


async def _forgotten(store: Store, identity: str, queues: list[str]) -> bool:
    return not await registered_anywhere(store, identity, queues)


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
    await store.client.set(keys.orphanings("default", "j7"), 2)  # recovered twice already
    await plant_dead(store, {"default": [poison]})
    await store.client.hset(keys.beats, DEAD, json.dumps({"pid": 999, "rss_bytes": 1}))
    async with jobs.worker():
        await wait_until(lambda: store.client.zcard(keys.dead("default")), timeout=5)
    [entry] = [json.loads(e) for e in await store.client.zrange(keys.dead("default"), 0, -1)]
    assert entry["jid"] == "j7"
    assert entry["error_class"] == "ProcessDied"
    assert entry["orphaned_from"] == DEAD
    assert entry["orphaned_process"]["pid"] == 999
    assert await store.client.llen(keys.repeat_orphans("default")) == 0
    assert await store.client.exists(keys.orphanings("default", "j7")) == 0
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
        own = store.keys.in_progress("default", manager.identity)
        await store.client.lpush(own, raw_job("stray", 5))
        await wait_until(lambda: ran == [5], timeout=5)
    assert ran == [5]


async def test_a_list_an_earlier_process_of_the_same_identity_left_on_another_queue_comes_back(
    make_app: Callable[..., App], store: Store
) -> None:
    """A configured identity (say a StatefulSet's pod name) whose process was killed
    while serving "old", started again to serve "default" only: nothing beats in old's
    slot any more, so the list there has no live owner, and its job must come back
    within the bound although a process of that identity is alive (it is on nobody's
    own list: no reconcile pass looks at it)."""
    reused = "worker-0"
    left = raw_job("x", 4, queue="old")
    await plant_dead(store, {"old": [left]}, identity=reused)
    jobs = make_app(identity=reused, queues=["default"], orphan_threshold=1.0,
                    recovery_interval=0.2)

    async def back() -> bool:
        return bool(await store.client.lrange(store.keys.queue("old"), 0, -1) == [left])

    async with jobs.worker():
        await wait_until(back, timeout=5)
    assert await store.client.exists(store.keys.in_progress("old", reused)) == 0


async def test_handed_over_failures_are_filed_not_rerun(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    keys = store.keys
    record = json.dumps({"set": "dead", "delay": 0,
                         "payload": raw_job("x", 3).decode()}).encode()
    await store.client.rpush(keys.unsettled("default"), record, b"not a record")
    async with jobs.worker():
        await wait_until(lambda: _zcard_is(store, keys.dead("default"), 2), timeout=5)
    entries = [json.loads(e) for e in await store.client.zrange(keys.dead("default"), 0, -1)]
    assert {e.get("jid") for e in entries} >= {"j3"}
    [unreadable] = [e for e in entries if e.get("error_class") == "UnparseablePayload"]
    assert unreadable["queue"] == "default"  # the queue whose hand-over list held it
    assert await store.client.llen(keys.unsettled("default")) == 0


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

    async with jobs.worker():
        await anyio.sleep(0.3)  # setup: let the dispatcher go idle on an empty queue
        await plant_dead(store, {"default": [raw_job("woken", 9)]})
        with anyio.fail_after(5):
            await ran.wait()


async def test_a_dead_process_s_list_on_a_queue_the_registry_lost_comes_back(
    make_app: Callable[..., App], store: Store
) -> None:
    """Redis lost the queue-name registry (and that queue's registry of processes): the
    dead process's last beat still says it served "lost", so its list there is found
    and requeued — not forgotten with the process while the list waits forever."""
    job = raw_job("l", 1, queue="lost")
    await plant_dead(store, {"lost": [job]})
    await store.client.hset(store.keys.beats, DEAD, json.dumps({"queues": ["lost"]}))
    await store.client.srem(store.keys.queues, "lost")
    await store.client.delete(store.keys.queue_identities("lost"))

    jobs = make_app(queues=["default"], orphan_threshold=1.0)
    # A pass without the boot SCAN (which would find any list): the registries alone.
    moved = await Recovery(store, jobs.settings, "observer").recover_orphans(scan=False)
    assert moved == 1
    assert await store.client.lrange(store.keys.queue("lost"), 0, -1) == [job]
    assert await lists_left(store) == []


async def test_a_list_only_the_boot_scan_found_waits_until_its_slot_may_be_judged(
    make_app: Callable[..., App], store: Store
) -> None:
    """The boot SCAN finds a list no registry knows; a process that just started may not
    judge anyone yet (its own beats have not been steady for the threshold). The list is
    kept and judged once it may be — not dropped because the SCAN ran too early."""
    job = raw_job("s", 1, queue="unknown")
    await plant_dead(store, {"unknown": [job]})
    await store.client.srem(store.keys.queues, "unknown")
    await store.client.delete(store.keys.queue_identities("unknown"))
    await store.client.srem(store.keys.processes, DEAD)

    jobs = make_app(queues=["default"], orphan_threshold=1.0)
    steady = False
    recovery = Recovery(store, jobs.settings, "observer", may_judge=lambda queue: steady)
    assert await recovery.recover_orphans(scan=True) == 0
    assert recovery.scanned
    assert await store.client.llen(store.keys.in_progress("unknown", DEAD)) == 1
    steady = True
    assert await recovery.recover_orphans(scan=True) == 1  # no second SCAN: kept from it
    assert await store.client.lrange(store.keys.queue("unknown"), 0, -1) == [job]
