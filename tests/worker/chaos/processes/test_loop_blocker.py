"""Scenario 4 (K8) — a job blocks the event loop for 3 × ``orphan_threshold``.

``time.sleep`` inside an ``async def``: the worker's loop is frozen, but its heartbeat
runs on its own thread and connection, so the process must not be declared dead while
another process runs orphan recovery all along; and each beat carries the loop's lag,
so the stall shows.

Must hold: no recovery at all (``<ns>:recoveries`` empty), the job started and finished
exactly once, and the blocked process's beats report a lag above 1 s.
"""

from __future__ import annotations

import signal
from typing import Final

import redis.asyncio

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.conftest import (
    EXIT_SLACK,
    Clock,
    Fleet,
    beats,
    identity_of,
    marks,
    recoveries,
    report,
    wait_ready,
)

pytestmark = marks(short_timeout=60, full_timeout=60)

SETTINGS: Final = chaosapp.SETTINGS
BLOCK: Final = 3 * SETTINGS["orphan_threshold"]
LAG_SEEN_MS: Final = 1000


async def _acked(r: redis.asyncio.Redis, key: str) -> bool:
    return not await r.llen(key)  # the job records its finish a moment before its ack


async def test_blocked_event_loop_is_not_a_dead_process(
    r: redis.asyncio.Redis, jobs: chaosapp.Jobs, fleet: Fleet, namespace: str
) -> None:
    blocked = fleet.start("--queue", "blocking")
    observer = fleet.start()  # the default queue: it only runs recovery here
    await wait_ready(r, namespace, [blocked, observer])
    identity = await identity_of(r, namespace, blocked)
    observer_identity = await identity_of(r, namespace, observer)

    await jobs.blocker.enqueue("block", BLOCK)
    clock = Clock()
    lags: list[float] = []
    lock_holders: set[str] = set()
    finished = chaosapp.finished_key(namespace)

    async def done_while_watching() -> bool:
        """Samples the beat's lag and who runs recovery, until the job finished and a
        beat after it was read."""
        info = (await beats(r, namespace)).get(identity, {})
        lags.append(float(info.get("lag_ms", 0.0)))
        holder = await r.get(Keys(namespace).recovery_lock)
        if holder:
            lock_holders.add(as_bytes(holder).decode())
        return await r.llen(finished) >= 1 and clock() > BLOCK + SETTINGS["heartbeat_interval"]

    await wait_until(done_while_watching, timeout=BLOCK + 15, every=0.05)
    starts = await chaosapp.counts(r, chaosapp.started_key(namespace))
    finishes = await chaosapp.counts(r, finished)
    events = await recoveries(r, namespace)
    report("loop_blocker", block_s=BLOCK, orphan_threshold=SETTINGS["orphan_threshold"],
           max_lag_ms=max(lags), false_recoveries=len(events), runs=starts["block"],
           observer_ran_recovery=observer_identity in lock_holders)

    assert events == []
    assert starts["block"] == 1
    assert finishes["block"] == 1
    assert max(lags) > LAG_SEEN_MS
    assert observer_identity in lock_holders, "recovery never ran elsewhere meanwhile"
    assert blocked.alive()
    keys = Keys(namespace)
    assert await r.sismember(keys.processes, identity)
    assert await r.sismember(keys.queue_identities("blocking"), identity)
    await wait_until(lambda: _acked(r, keys.in_progress("blocking", identity)), timeout=5)
    assert await r.zcard(keys.dead("blocking")) == 0
    limit = SETTINGS["shutdown_timeout"] + EXIT_SLACK
    for worker in (blocked, observer):
        worker.signal(signal.SIGTERM)
    for worker in (blocked, observer):
        assert await worker.wait_exit(limit) == 0
