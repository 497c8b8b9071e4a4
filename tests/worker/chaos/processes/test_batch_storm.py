"""Scenario — batches under a SIGKILL storm.

Batches of 20 jobs spread over 3 queues (every fifth batch with one member that dies),
each with on_complete, on_success and on_death callbacks, worked by 4 processes while,
each time another share of the members has started (not on the clock), one is SIGKILLed
(frozen first, its in-progress lists read: what it held) and
a new one started.

Must hold, for every batch:
- on_complete ran once; on_success once if no member died, never otherwise; on_death
  once if one died, never otherwise — "once" meaning exactly one run, or one more per
  kill that held that callback's run (a run cut short by a kill runs again: delivery is
  at least once; the enqueue of a callback is exactly once, by its jid);
- its state is success (no member died) or dead;
- no member lost: each finished at least once;
- and at the end nothing waits for the relay: no note, no batch with a callback due.
"""

from __future__ import annotations

import json
import os
import random
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import anyio
import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.conftest import (
    SCALE,
    Clock,
    Fleet,
    beats,
    marks,
    report,
    wait_ready,
)
from tests.workerproc import WorkerProcess

pytestmark = marks(short_timeout=180, full_timeout=900)

QUEUES: Final = ["default", "second", "third"]
SIZES: Final = {"short": 150, "full": 500}
"""Batches of each run."""
MEMBERS: Final = 20
WORKERS: Final = 4
CONCURRENCY: Final = 10
KILL_AT: Final = {"short": (0.05, 0.3, 0.55),
                  "full": tuple(share / 20 for share in range(1, 18))}
"""When each kill comes: as the share of members started reaches each of these (the
clock paced it before, and a quick machine was done before the second kill)."""
SETTINGS: Final = {**chaosapp.SETTINGS, "queues": QUEUES}


@dataclass
class Storm:
    r: redis.asyncio.Redis
    namespace: str
    fleet: Fleet
    rng: random.Random
    workers: list[WorkerProcess]
    held: Counter[str] = field(default_factory=Counter)
    """Tags on victims' in-progress lists at their kills (a run that may go again)."""
    kills: int = 0
    tags: Callable[[list[bytes | str]], list[str]] = field(default=lambda raws: _tags(raws))
    """The tag of each raw job, as the scenario's jobs record it."""

    async def kill_one(self) -> bool:
        by_pid = {info.get("pid"): identity
                  for identity, info in (await beats(self.r, self.namespace)).items()}
        known = [w for w in self.workers if w.alive() and w.pid in by_pid]
        if not known:
            return False
        worker = self.rng.choice(known)
        keys = Keys(self.namespace)
        lists = [keys.in_progress(queue, by_pid[worker.pid]) for queue in QUEUES]
        worker.signal(signal.SIGSTOP)
        before = [raw for key in lists for raw in await self.r.lrange(key, 0, -1)]
        worker.kill()
        after = [raw for key in lists for raw in await self.r.lrange(key, 0, -1)]
        for tag in set(self.tags(before + after)):
            self.held[tag] += 1
        self.kills += 1
        self.workers[self.workers.index(worker)] = self.fleet.start(
            concurrency=CONCURRENCY, **SETTINGS)
        return True


async def _kill_on_progress(r: redis.asyncio.Redis, storm: Storm, namespace: str,
                            total: int) -> None:
    """Kills on events, not on the clock: one each time another share of the members has
    started (``KILL_AT``; a quick machine finished the short run before its second timed
    kill)."""
    marks_at = [int(total * share) for share in KILL_AT[SCALE]]
    started = chaosapp.started_key(namespace)
    while marks_at:
        if await r.llen(started) < marks_at[0]:
            await anyio.sleep(0.02)  # polling a count, not waiting for luck
        elif await storm.kill_one():
            marks_at.pop(0)
        else:
            await anyio.sleep(0.05)  # no victim known by its beat yet


def _tags(raws: list[bytes | str]) -> list[str]:
    """The tag of each raw job: a member's first argument, a callback's kind:bid."""
    found = []
    for raw in raws:
        payload = json.loads(raw)
        tag = str(payload["args"][0])
        found.append(f"{tag}:{payload['bid']}" if "batch_callback" in payload else tag)
    return found


async def _enqueue(jobs: chaosapp.Jobs, batches: int, rng: random.Random
                   ) -> tuple[dict[str, list[str]], set[str]]:
    """bid -> its members' tags; the bids with a member that dies."""
    members: dict[str, list[str]] = {}
    dying: set[str] = set()
    for b in range(batches):
        async with jobs.app.batch(f"storm {b}", on_complete=jobs.callback.s("complete"),
                                  on_success=jobs.callback.s("success"),
                                  on_death=jobs.callback.s("death")) as batch:
            tags = [f"b{b}m{m}" for m in range(MEMBERS)]
            for m, tag in enumerate(tags):
                queue = QUEUES[m % len(QUEUES)]
                if b % 5 == 4 and m == 7:
                    await jobs.fail.options(queue=queue).enqueue(tag, 0.05)
                else:
                    await jobs.work.options(queue=queue).enqueue(
                        tag, round(rng.uniform(0.1, 0.4), 3))
        members[batch.bid] = tags
        if b % 5 == 4:
            dying.add(batch.bid)
    return members, dying


async def _settled(r: redis.asyncio.Redis, jobs: chaosapp.Jobs,
                   members: dict[str, list[str]]) -> bool:
    """Every batch ended, nothing left for the relay, no job waiting or running."""
    keys = Keys(jobs.app.settings.namespace)
    for queue in QUEUES:
        if await r.llen(keys.queue(queue)) or await r.llen(keys.batch_notes(queue)):
            return False
    if await r.zcard(keys.batches_firing):
        return False
    for bid in members:
        if (await jobs.app.batch_status(bid)).state not in ("success", "dead"):
            return False
    async for key in r.scan_iter(match=keys.in_progress_pattern):
        if await r.llen(key):
            return False
    return True


async def test_every_batch_calls_each_callback_once_through_a_sigkill_storm(
    r: redis.asyncio.Redis, fleet: Fleet, server: object, namespace: str,
) -> None:
    batches = SIZES[SCALE]
    seed = int(os.environ.get("COGWORKER_CHAOS_SEED") or random.randrange(2**32))
    print(f"seed {seed} (COGWORKER_CHAOS_SEED to replay)")
    rng = random.Random(seed)
    jobs = chaosapp.build(fleet.url, namespace, queues=QUEUES)
    try:
        workers = [fleet.start(concurrency=CONCURRENCY, **SETTINGS) for _ in range(WORKERS)]
        await wait_ready(r, namespace, workers)
        clock = Clock()
        storm = Storm(r, namespace, fleet, rng, workers)
        async with anyio.create_task_group() as tg:  # kills while the batches go in too
            tg.start_soon(_kill_on_progress, r, storm, namespace, batches * MEMBERS)
            members, dying = await _enqueue(jobs, batches, rng)
        await wait_until(lambda: _settled(r, jobs, members), timeout=120, every=0.2)
        took = clock()

        starts = await chaosapp.counts(r, chaosapp.started_key(namespace))
        finishes = await chaosapp.counts(r, chaosapp.finished_key(namespace))
        lost = [tag for tags in members.values() for tag in tags if finishes[tag] < 1]
        assert not lost, f"{len(lost)} member(s) never finished: {lost[:20]}"
        wrong: dict[str, tuple[object, ...]] = {}
        for bid in members:
            expected = {"complete": 1, "success": 0 if bid in dying else 1,
                        "death": 1 if bid in dying else 0}
            for kind, want in expected.items():
                tag = f"{kind}:{bid}"
                got = starts[tag]
                if (want == 0 and got) or (want == 1 and not 1 <= got <= 1 + storm.held[tag]):
                    wrong[tag] = (got, want, storm.held[tag])
            state = (await jobs.app.batch_status(bid)).state
            if state != ("dead" if bid in dying else "success"):
                wrong[f"state:{bid}"] = (state, bid in dying, 0)
        assert not wrong, f"callbacks (runs, wanted, held at kills): {wrong}"
        report("batch_storm", batches=batches, members=batches * MEMBERS, kills=storm.kills,
               dying=len(dying), callback_reruns=sum(
                   starts[t] - 1 for t in starts if ":" in t and starts[t] > 1),
               seconds=round(took, 1))
        assert storm.kills >= 2, "the jobs were done before a second kill"
    finally:
        await jobs.app.close()
