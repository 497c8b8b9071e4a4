"""Scenario 5 (K7) — a paused process (SIGSTOP: a VM freeze, a long GC) comes back.

Workers A and B; B is frozen for a moment while A fetches each job, so that A runs a
long job and B only runs orphan recovery. A is paused: a pause shorter than
``orphan_threshold`` is not a death, nothing is recovered. A then fetches a short job
too and is paused for longer: B recovers both jobs from A's list and runs
the short one to the end; only then does A continue (SIGCONT). A is a zombie: its jobs
were taken from it, and B still runs the long one.

Must hold: the job was recovered once (one recovery event); A notices at its next beat
that it was declared dead (it says so in its log) and its late settlement changes
nothing: its running copy of the long job is cancelled, neither job is in retry or dead
or requeued, A's list is gone, and B's list (the same bytes of the long job) is
untouched.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Coroutine
from typing import Any, Final

import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.conftest import (
    EXIT_SLACK,
    Fleet,
    beats,
    identity_of,
    in_progress_lists,
    marks,
    recoveries,
    report,
    tags_of,
    wait_ready,
)
from tests.workerproc import WorkerProcess

pytestmark = marks(short_timeout=60, full_timeout=60)

SETTINGS: Final = chaosapp.SETTINGS
JOB: Final = 2.0
"""Seconds the paused job runs."""
SHORT_PAUSE: Final = SETTINGS["orphan_threshold"] / 2
LONG: Final = 60.0
DECLARED_DEAD: Final = "was declared dead"


async def _ran(r: redis.asyncio.Redis, key: str, tag: str, worker: WorkerProcess) -> bool:
    return (tag, worker.pid) in await chaosapp.runs(r, key)


async def _run_on(a: WorkerProcess, b: WorkerProcess, r: redis.asyncio.Redis, started: str,
                  tag: str, enqueue: Coroutine[Any, Any, str | None]) -> str:
    """Enqueue a job for A to run, not B: B is frozen (far shorter than orphan_threshold)
    until A has started it."""
    b.signal(signal.SIGSTOP)
    try:
        jid = await enqueue
        assert jid is not None
        await wait_until(lambda: _ran(r, started, tag, a), timeout=5)
    finally:
        b.signal(signal.SIGCONT)
    return jid


async def _short_pause_is_not_death(r: redis.asyncio.Redis, namespace: str,
                                    a: WorkerProcess, a_identity: str) -> None:
    """A paused for orphan_threshold / 2 while B runs recovery: nothing is recovered."""
    keys = Keys(namespace)
    a_key = keys.in_progress("default", a_identity)
    a_list = await r.lrange(a_key, 0, -1)
    # The queue's slot's stamp: the one recovery judges A by (requeue.lua).
    stamp = await r.hget(keys.queue_last_beat("default"), a_identity)
    a.signal(signal.SIGSTOP)
    time.sleep(SHORT_PAUSE)  # the pause itself, not a wait for a condition
    a.signal(signal.SIGCONT)

    async def beaten_again() -> bool:  # from then on, no recovery can take A's jobs
        return await r.hget(keys.queue_last_beat("default"), a_identity) != stamp

    await wait_until(beaten_again, timeout=5)
    assert await recoveries(r, namespace) == []
    assert await r.lrange(a_key, 0, -1) == a_list


async def test_zombie_fences_itself_and_its_late_settlement_changes_nothing(
    r: redis.asyncio.Redis, jobs: chaosapp.Jobs, fleet: Fleet, namespace: str
) -> None:
    started, finished = chaosapp.started_key(namespace), chaosapp.finished_key(namespace)
    a, b = fleet.start(), fleet.start()
    await wait_ready(r, namespace, [a, b])
    a_identity = await identity_of(r, namespace, a)
    b_identity = await identity_of(r, namespace, b)
    await _run_on(a, b, r, started, "victim-long", jobs.work.enqueue("victim-long", LONG))
    await _short_pause_is_not_death(r, namespace, a, a_identity)

    victim = await _run_on(a, b, r, started, "victim", jobs.work.enqueue("victim", JOB))
    a.signal(signal.SIGSTOP)
    paused_at = time.monotonic()
    bound = SETTINGS["orphan_threshold"] + SETTINGS["recovery_interval"] + 2.0 + JOB
    await wait_until(lambda: _ran(r, finished, "victim", b), timeout=bound + 5)
    recovered_in = time.monotonic() - paused_at
    keys = Keys(namespace)
    b_key = keys.in_progress("default", b_identity)

    async def b_acked_victim() -> bool:  # it records its finish a moment before its ack
        return tags_of(await r.lrange(b_key, 0, -1)) == ["victim-long"]

    await wait_until(b_acked_victim, timeout=5)
    b_list = await r.lrange(b_key, 0, -1)  # the same bytes A still "runs"

    a.signal(signal.SIGCONT)
    resumed_at = time.monotonic()
    await wait_until(lambda: DECLARED_DEAD in a.log(), timeout=5)
    noticed_in = time.monotonic() - resumed_at

    async def a_idle() -> bool:
        return (await beats(r, namespace)).get(a_identity, {}).get("busy") == 0

    await wait_until(a_idle, timeout=5)
    a.signal(signal.SIGTERM)  # its exit also guarantees its late settlements are done
    assert await a.wait_exit(SETTINGS["shutdown_timeout"] + EXIT_SLACK) == 0

    events = await recoveries(r, namespace)
    runs = await chaosapp.runs(r, started)
    ends = await chaosapp.runs(r, finished)
    cancelled = re.search(r"(\d+) running job\(s\) cancelled here", a.log())
    report("zombie", recovered_and_rerun_in_s=round(recovered_in, 2),
           zombie_noticed_in_s=round(noticed_in, 2), recoveries=len(events),
           victim_starts=sum(t == "victim" for t, _ in runs),
           victim_finishes=sum(t == "victim" for t, _ in ends),
           zombie_finished_its_copy=("victim", a.pid) in ends,
           zombie_cancelled=cancelled and int(cancelled.group(1)))
    assert [(e["identity"], e["requeued"], e["by"]) for e in events] == [
        (a_identity, 2, b_identity)]
    for tag in ("victim", "victim-long"):
        assert [pid for t, pid in runs if t == tag] == [a.pid, b.pid], tag
    assert cancelled is not None
    assert int(cancelled.group(1)) >= 1  # victim-long, at least
    for key in (keys.retry("default"), keys.dead("default")):
        assert await r.zcard(key) == 0, key
    assert await r.llen(keys.queue("default")) == 0  # nothing given back by A
    assert await in_progress_lists(r, namespace) == {("default", b_identity): b_list}
    assert not await r.exists(keys.orphanings("default", victim))

    b.signal(signal.SIGTERM)  # victim-long goes back to its queue, once
    assert await b.wait_exit(SETTINGS["shutdown_timeout"] + EXIT_SLACK) == 0
    assert await in_progress_lists(r, namespace) == {}
    assert tags_of(await r.lrange(keys.queue("default"), 0, -1)) == ["victim-long"]
