"""Scenario — a cancel and a crash at once: ``jobs.cancel(jid)`` of jobs running in
worker process A, and A SIGKILLed in the same second, in both orders (cancel, then kill
at once; kill, then cancel). Then worker B starts and recovers A's list.

A cancel of a running job is kept in its status record (``cancel``), not only in A's
cancel set: A may die before it polls the set, and recovery must then drop the job
instead of requeueing it (lua/requeue.lua).

Must hold, once recovery has taken A's list (A's in-progress list gone) and B has
fetched past anything it requeued (a job enqueued after the recovery has run):
- a cancelled job never runs again: started once (in A), finished never; its status
  is ``cancelled``, with no cancel left pending;
- a job running next to it in A that was not cancelled was recovered: it ran exactly
  once more (in B), finished, and its status is ``succeeded``;
- nothing is left on the queue, any in-progress list, the schedule, retry, dead or
  repeat_orphans; a cancel set left for the dead A has a TTL.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import pytest
import redis.asyncio

from cogworker_async.jobs.status import CancelOutcome
from cogworker_async.jobs.wire import jid_of
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp, valuesapp
from tests.worker.chaos.processes.conftest import (
    READY_TIMEOUT,
    SCALE,
    Fleet,
    identity_of,
    in_progress_lists,
    marks,
    recoveries,
    report,
    wait_ready,
)
from tests.worker.chaos.processes.valuesapp import counts, finishes_key, starts_key
from tests.workerproc import WorkerProcess

pytestmark = marks(short_timeout=60, full_timeout=120)

SETTINGS: Final = chaosapp.SETTINGS
BOUND: Final = SETTINGS["orphan_threshold"] + SETTINGS["recovery_interval"] + 2.0
"""The published recovery bound: a dead process's jobs are back within this."""
FIRST: Final = 600.0
"""Seconds a first run lasts: longer than the test, so only the kill or a cancel ends it."""
AGAIN: Final = 0.2
"""Seconds a recovered run lasts."""


@dataclass(frozen=True)
class Size:
    running: int
    """Jobs running in A at the kill."""
    cancelled: int
    """Of those, how many are cancelled."""


SIZES: Final = {
    "short": {"one": Size(1, 1), "many": Size(20, 10)},
    "full": {"one": Size(1, 1), "many": Size(100, 50)},
}


@pytest.fixture
async def values(server: ServerProcess, namespace: str) -> AsyncIterator[valuesapp.Jobs]:
    built = valuesapp.build(server.url, namespace)
    yield built
    await built.app.close()


async def _all_started(r: redis.asyncio.Redis, namespace: str, jids: list[str]) -> bool:
    started = await counts(r, starts_key(namespace))
    return all(started.get(jid) == 1 for jid in jids)


async def _cancel_and_kill(values: valuesapp.Jobs, a: WorkerProcess, cancelled: list[str],
                           order: str) -> tuple[list[CancelOutcome], float]:
    """Cancel ``cancelled`` and SIGKILL A in ``order``; (cancel outcomes, seconds from the
    first of the two to the last)."""
    began = time.monotonic()
    if order == "kill-then-cancel":
        a.kill()  # SIGKILL, reaped: dead before the first cancel
    outcomes = [await values.app.cancel(jid) for jid in cancelled]
    if order == "cancel-then-kill":
        a.kill()
    return outcomes, time.monotonic() - began


async def _statuses(values: valuesapp.Jobs, jids: list[str]) -> list[tuple[str, bool]]:
    found = [await values.app.status(jid) for jid in jids]
    return [(status.state, status.cancel_requested) for status in found]


async def _cancel_sets(r: redis.asyncio.Redis, namespace: str) -> int:
    """How many cancel sets are left (the dead A's, say); each must have a TTL."""
    found = 0
    async for key in r.scan_iter(match=Keys(namespace).cancels_prefix("default") + "*"):
        found += 1
        assert await r.ttl(key) > 0, f"{key!r} has no TTL"
    return found


async def _nothing_left(r: redis.asyncio.Redis, namespace: str) -> None:
    """No job is anywhere: queue, in-progress lists, schedule, retry, dead, parked."""
    keys = Keys(namespace)
    assert await in_progress_lists(r, namespace) == {}
    assert await r.llen(keys.queue("default")) == 0
    for key in (keys.schedule("default"), keys.retry("default"), keys.dead("default")):
        assert await r.zcard(key) == 0, key
    assert await r.llen(keys.repeat_orphans("default")) == 0
    assert await r.llen(keys.unsettled("default")) == 0


async def _running_in_a(r: redis.asyncio.Redis, values: valuesapp.Jobs, fleet: Fleet,
                        namespace: str, size: Size) -> tuple[WorkerProcess, str, list[str]]:
    """Worker A, its identity, and the jids of ``size.running`` jobs it has started."""
    a = valuesapp.start_in(fleet, concurrency=size.running)
    await wait_ready(r, namespace, [a])
    a_identity = await identity_of(r, namespace, a)
    enqueued = await values.hold.enqueue_many([((FIRST, AGAIN), {})] * size.running)
    jids = [jid for jid in enqueued if jid is not None]
    await wait_until(lambda: _all_started(r, namespace, jids), timeout=READY_TIMEOUT)
    return a, a_identity, jids


async def _recovered_by_b(r: redis.asyncio.Redis, values: valuesapp.Jobs, fleet: Fleet,
                          namespace: str, a_list: str, others: list[str]) -> WorkerProcess:
    """Start B; return once it has recovered A's list and settled everything requeued."""
    b = valuesapp.start_in(fleet, concurrency=max(10, len(others)))
    await wait_until(lambda: _gone(r, a_list), timeout=BOUND + READY_TIMEOUT, every=0.02)
    # Any job recovery put back is fetched before one enqueued now (the queue is FIFO
    # and recovery pushes on its fetch end): once this one has finished in B, B has
    # started everything requeued, the cancelled jobs too had they been.
    marker = await values.hold.enqueue(0.0, 0.0)
    assert marker is not None
    await wait_until(lambda: _finished(r, namespace, [marker, *others]), timeout=BOUND + 10)

    async def settled() -> bool:  # each finish is counted a moment before its ack
        return (await _statuses(values, [marker, *others])
                == [("succeeded", False)] * (len(others) + 1))

    await wait_until(settled, timeout=5)
    return b


@pytest.mark.parametrize("shape", ["one", "many"])
@pytest.mark.parametrize("order", ["cancel-then-kill", "kill-then-cancel"])
async def test_a_job_cancelled_as_its_process_dies_never_runs_again(
    r: redis.asyncio.Redis, values: valuesapp.Jobs, fleet: Fleet, namespace: str,
    order: str, shape: str,
) -> None:
    size = SIZES[SCALE][shape]
    a, a_identity, jids = await _running_in_a(r, values, fleet, namespace, size)
    cancelled, others = jids[:size.cancelled], jids[size.cancelled:]

    outcomes, window = await _cancel_and_kill(values, a, cancelled, order)
    killed_at = time.monotonic()
    assert outcomes == ["stopping"] * len(cancelled)  # they were running
    a_list = Keys(namespace).in_progress("default", a_identity)
    held = {jid_of(as_bytes(raw)) for raw in await r.lrange(a_list, 0, -1)}
    # A may have polled its cancel set between a cancel and the kill and settled the
    # job itself (acked as cancelled); any other is still on its list for recovery.
    settled_by_a = [jid for jid in cancelled if jid not in held]
    assert set(others) <= held

    b = await _recovered_by_b(r, values, fleet, namespace, a_list, others)
    recovered_in = time.monotonic() - killed_at
    starts = await counts(r, starts_key(namespace))
    finishes = await counts(r, finishes_key(namespace))
    events = await recoveries(r, namespace)
    report(f"cancel_crash {order} {shape}", running=size.running, cancelled=len(cancelled),
           cancel_kill_window_ms=round(window * 1000, 1),
           settled_by_a_before_kill=len(settled_by_a),
           dropped_by_recovery=len(cancelled) - len(settled_by_a),
           recovered_and_settled_in_s=round(recovered_in, 2),
           requeued=sum(int(e["requeued"]) for e in events),
           cancelled_starts=sorted({starts.get(jid, 0) for jid in cancelled}),
           others_starts=sorted({starts.get(jid, 0) for jid in others}),
           cancel_sets_left=await _cancel_sets(r, namespace))
    assert b.alive()
    assert [starts.get(jid, 0) for jid in cancelled] == [1] * len(cancelled)
    assert [finishes.get(jid, 0) for jid in cancelled] == [0] * len(cancelled)
    assert await _statuses(values, cancelled) == [("cancelled", False)] * len(cancelled)
    assert [starts.get(jid, 0) for jid in others] == [2] * len(others)
    assert [finishes.get(jid, 0) for jid in others] == [1] * len(others)
    await _nothing_left(r, namespace)
    assert sum(int(e["requeued"]) for e in events) == len(others)
    assert sum(int(e.get("cancelled", 0)) for e in events) == len(cancelled) - len(settled_by_a)
    assert all(e["identity"] == a_identity for e in events)


async def _gone(r: redis.asyncio.Redis, key: str) -> bool:
    return not await r.exists(key)


async def _finished(r: redis.asyncio.Redis, namespace: str, jids: list[str]) -> bool:
    finishes = await counts(r, finishes_key(namespace))
    return all(finishes.get(jid, 0) >= 1 for jid in jids)
