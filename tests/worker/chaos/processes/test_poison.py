"""Scenario 3 (K5) — a poison job that SIGKILLs its own process every time it runs.

Three workers (concurrency 10) and a supervisor in the test that starts a new worker
for each one that dies. The poison kills one process per run; orphan recovery brings it
back each time, counting; past ``max_orphanings`` it is buried in dead as
``ProcessDied`` instead of killing workers forever.

Must hold: the poison ran exactly ``max_orphanings + 1`` times and lies in dead with
``error_class == "ProcessDied"``; every other job finished, and none was buried.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final, cast

import anyio
import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.conftest import (
    FULL,
    Clock,
    Fleet,
    marks,
    report,
    wait_ready,
)
from tests.workerproc import WorkerProcess

pytestmark = marks(short_timeout=90, full_timeout=300)

WORKERS: Final = 3
CONCURRENCY: Final = 10
INNOCENTS: Final = 200 if FULL else 100
INNOCENT_SECONDS: Final = 0.05
SETTINGS: Final = chaosapp.SETTINGS
MAX_ORPHANINGS: Final = SETTINGS["max_orphanings"]
RESTART: Final = 5.0
"""Seconds a worker may take to start on a busy 2-core machine."""
BURIAL_BUDGET: Final = (MAX_ORPHANINGS + 1) * (
    SETTINGS["orphan_threshold"] + SETTINGS["recovery_interval"] + 2.0 + RESTART)


@dataclass
class Supervisor:
    """Starts a new worker for each one that exits, like systemd or Kubernetes would."""

    fleet: Fleet
    clock: Clock
    workers: list[WorkerProcess]
    deaths: list[float] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            for index, worker in enumerate(self.workers):
                if not worker.alive():
                    self.deaths.append(round(self.clock(), 2))
                    self.workers[index] = self.fleet.start(concurrency=CONCURRENCY)
            await anyio.sleep(0.05)


async def _buried(r: redis.asyncio.Redis, namespace: str, jid: str) -> dict[str, object] | None:
    for member in cast("list[bytes]", await r.zrange(Keys(namespace).dead("default"), 0, -1)):
        entry = json.loads(member)
        if entry.get("jid") == jid:
            return dict(entry)
    return None


async def _is_buried(r: redis.asyncio.Redis, namespace: str, jid: str) -> bool:
    return await _buried(r, namespace, jid) is not None


async def _innocents_settled(r: redis.asyncio.Redis, namespace: str,
                             innocents: list[str]) -> bool:
    """Every innocent job finished, or lies in dead (buried with the poison)."""
    done = set(await chaosapp.counts(r, chaosapp.finished_key(namespace)))
    done |= set(await _dead_tags(r, namespace))
    return done >= set(innocents)


async def _dead_tags(r: redis.asyncio.Redis, namespace: str) -> list[str]:
    dead = cast("list[bytes]", await r.zrange(Keys(namespace).dead("default"), 0, -1))
    return [str(json.loads(m)["args"][0]) for m in dead]


async def test_poison_job_is_buried_after_max_orphanings_and_the_rest_finish(
    r: redis.asyncio.Redis, jobs: chaosapp.Jobs, fleet: Fleet, namespace: str
) -> None:
    workers = [fleet.start(concurrency=CONCURRENCY) for _ in range(WORKERS)]
    await wait_ready(r, namespace, workers)
    supervisor = Supervisor(fleet, Clock(), workers)
    half = INNOCENTS // 2
    innocents = [f"ok{i}" for i in range(INNOCENTS)]
    calls: list[tuple[tuple[str, float], dict[str, Any]]] = [
        ((tag, INNOCENT_SECONDS), {}) for tag in innocents]
    await jobs.work.enqueue_many(calls[:half])
    pill = await jobs.poison.enqueue("pill")
    assert pill is not None
    await jobs.work.enqueue_many(calls[half:])

    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.run)
        await wait_until(lambda: _is_buried(r, namespace, pill), timeout=BURIAL_BUDGET,
                         every=0.05)
        buried_at = supervisor.clock()
        await wait_until(lambda: _innocents_settled(r, namespace, innocents), timeout=30,
                         every=0.05)
        tg.cancel_scope.cancel()

    entry = await _buried(r, namespace, pill)
    starts = await chaosapp.counts(r, chaosapp.started_key(namespace))
    finishes = await chaosapp.counts(r, chaosapp.finished_key(namespace))
    buried_innocents = sorted(set(await _dead_tags(r, namespace)) - {"pill"})
    report("poison", innocents=INNOCENTS, workers=WORKERS, concurrency=CONCURRENCY,
           max_orphanings=MAX_ORPHANINGS, pill_runs=starts["pill"],
           deaths_at_s=supervisor.deaths, seconds_to_burial=round(buried_at, 2),
           innocent_dup_starts=sum(starts[tag] - 1 for tag in innocents),
           innocents_most_starts=max(starts[tag] for tag in innocents),
           innocents_unfinished=sum(1 for tag in innocents if not finishes[tag]),
           innocents_buried=buried_innocents)
    assert entry is not None
    assert entry["error_class"] == "ProcessDied"
    assert starts["pill"] == MAX_ORPHANINGS + 1
    assert len(supervisor.deaths) == MAX_ORPHANINGS + 1
    assert not await r.exists(Keys(namespace).orphanings("default", pill))
    # No bystander is buried: repeat orphans come back one per recovery pass, so the
    # poison dies alone (Recovery._held_back).
    assert buried_innocents == []
    for tag in innocents:
        assert finishes[tag] >= 1, tag
