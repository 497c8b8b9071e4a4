"""Scenario 1 (K1) — SIGKILL storm.

Four worker processes (concurrency 10) work through many short jobs while, every 2 s,
one of them is SIGKILLed and a new one started. Just before each kill the victim is
frozen (SIGSTOP) and its in-progress list read: exactly what it held when it died.

Must hold:
- nothing lost: every job finished at least once;
- a job ran more than once only if it was on a victim's list at a kill — at most once
  more per kill that held it (no job that was settled ever runs again);
- each victim's jobs were back within ``orphan_threshold + recovery_interval + 2 s`` of
  the kill (its list empty), and the victim was then forgotten by the registries (the
  queue's and the namespace's);
- at the end, after a graceful stop of the survivors: no in-progress list, no registered
  identity, no stale beat, no orphan counter without a TTL, nothing in retry or dead.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.conftest import (
    EXIT_SLACK,
    SCALE,
    Clock,
    Fleet,
    beats,
    in_progress_lists,
    marks,
    report,
    tags_of,
    wait_ready,
)
from tests.workerproc import WorkerProcess

pytestmark = marks(short_timeout=120, full_timeout=900)


@dataclass(frozen=True)
class Size:
    jobs: int
    seconds: tuple[float, float]
    """Each job sleeps a duration drawn uniformly from this range."""
    kills: int | None
    """The most kills (None: every KILL_EVERY seconds for as long as jobs wait)."""


SIZES: Final = {
    "short": Size(1_000, (0.1, 0.3), 3),
    "full": Size(10_000, (0.0, 0.2), None),
}
WORKERS: Final = 4
CONCURRENCY: Final = 10
KILL_EVERY: Final = 2.0
FIRST_KILL: Final = 1.0
"""Seconds after the jobs are enqueued before the first kill."""
SETTINGS: Final = chaosapp.SETTINGS
BOUND: Final = SETTINGS["orphan_threshold"] + SETTINGS["recovery_interval"] + 2.0
"""The published recovery bound: a dead process's jobs are back within this."""


@dataclass
class Kill:
    pid: int
    identity: str
    at: float
    held: list[str]
    """Tags on the victim's in-progress list when it died."""
    back_after: float | None = None
    """Seconds from the kill until its list was empty (its jobs requeued)."""
    forgotten_after: float | None = None
    """... until it had left the registry of identities too."""


@dataclass
class Storm:
    r: redis.asyncio.Redis
    namespace: str
    fleet: Fleet
    clock: Clock
    rng: random.Random
    workers: list[WorkerProcess]
    kills: list[Kill] = field(default_factory=list)

    async def victim(self) -> tuple[WorkerProcess, str] | None:
        """A random live worker that has beaten (so that its identity is known)."""
        by_pid = {info.get("pid"): identity
                  for identity, info in (await beats(self.r, self.namespace)).items()}
        known = [w for w in self.workers if w.alive() and w.pid in by_pid]
        if not known:
            return None
        worker = self.rng.choice(known)
        return worker, by_pid[worker.pid]

    async def kill(self, worker: WorkerProcess, identity: str) -> Kill:
        """Freeze, read its list, SIGKILL, read again (a command it sent just before the
        freeze may still be applied), start a replacement."""
        key = Keys(self.namespace).in_progress("default", identity)
        worker.signal(signal.SIGSTOP)
        at = self.clock()
        before = await self.r.lrange(key, 0, -1)
        worker.kill()
        after = await self.r.lrange(key, 0, -1)
        kill = Kill(worker.pid, identity, at, sorted(set(tags_of(before + after))))
        self.kills.append(kill)
        self.workers[self.workers.index(worker)] = self.fleet.start(concurrency=CONCURRENCY)
        return kill

    async def watch(self, kill: Kill) -> None:
        """Time the recovery of one victim (left at None if it never came)."""
        keys = Keys(self.namespace)
        key = keys.in_progress("default", kill.identity)
        registries = [keys.queue_identities("default"), keys.processes]
        try:
            await wait_until(lambda: self._gone(key), timeout=BOUND + 30, every=0.02)
            kill.back_after = self.clock() - kill.at
            await wait_until(lambda: self._forgotten(registries, kill.identity),
                             timeout=BOUND + 30, every=0.02)
            kill.forgotten_after = self.clock() - kill.at
        except AssertionError:
            return

    async def _gone(self, key: str) -> bool:
        return not await self.r.exists(key)

    async def _forgotten(self, registries: list[str], identity: str) -> bool:
        return not any([await self.r.sismember(key, identity) for key in registries])


async def _enqueue(jobs: chaosapp.Jobs, size: Size, rng: random.Random) -> list[str]:
    tags = [f"j{i}" for i in range(size.jobs)]
    low, high = size.seconds
    calls: list[tuple[tuple[str, float], dict[str, Any]]] = [
        ((tag, round(rng.uniform(low, high), 3)), {}) for tag in tags]
    for start in range(0, len(calls), 500):
        await jobs.work.enqueue_many(calls[start:start + 500])
    return tags


async def _quiescent(r: redis.asyncio.Redis, namespace: str, tags: list[str]) -> bool:
    """Every job finished, none waiting, none in progress anywhere."""
    if len(await chaosapp.counts(r, chaosapp.finished_key(namespace))) < len(tags):
        return False
    if await r.llen(Keys(namespace).queue("default")):
        return False
    return not any((await in_progress_lists(r, namespace)).values())


async def _storm(storm: Storm, size: Size, tags: list[str]) -> None:
    """Kill every KILL_EVERY s while jobs wait; then wait until all is done and every
    victim recovered."""
    queue = Keys(storm.namespace).queue("default")
    next_kill = FIRST_KILL
    async with anyio.create_task_group() as watchers:
        while size.kills is None or len(storm.kills) < size.kills:
            await anyio.sleep(max(0.0, next_kill - storm.clock()))  # pacing, not waiting
            if not await storm.r.llen(queue):
                break
            chosen = await storm.victim()
            if chosen is None:
                next_kill = storm.clock() + 0.1
                continue
            watchers.start_soon(storm.watch, await storm.kill(*chosen))
            next_kill += KILL_EVERY
        average = sum(size.seconds) / 2
        budget = len(tags) * average / (WORKERS * CONCURRENCY) * 4 + 4 * BOUND
        await wait_until(lambda: _quiescent(storm.r, storm.namespace, tags),
                         timeout=budget, every=0.1)


async def _stop_all(r: redis.asyncio.Redis, namespace: str,
                    workers: list[WorkerProcess]) -> None:
    """SIGTERM each worker once it is up, and expect a clean exit. The last replacement
    may still be starting Python when the jobs are done, before it has a SIGTERM handler
    (the signal's default then ends it, -15): the stop is checked on workers that are up."""
    await wait_ready(r, namespace, workers)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    limit = SETTINGS["shutdown_timeout"] + EXIT_SLACK
    for worker in workers:
        assert await worker.wait_exit(limit) == 0, worker.log()


def _check_runs(tags: list[str], kills: list[Kill], starts: Counter[str],
                finishes: Counter[str]) -> dict[str, int]:
    held = Counter(tag for kill in kills for tag in kill.held)
    lost = [tag for tag in tags if finishes[tag] < 1]
    assert not lost, f"{len(lost)} job(s) never finished: {lost[:20]}"
    assert set(starts) == set(tags)
    too_many = {tag: (starts[tag], held[tag]) for tag in tags
                if starts[tag] - 1 > held[tag] or finishes[tag] - 1 > held[tag]}
    assert not too_many, f"ran again without a kill holding them (runs, kills): {too_many}"
    return {
        "lost": len(lost),
        "dup_starts": sum(count - 1 for count in starts.values()),
        "dup_finishes": sum(count - 1 for count in finishes.values()),
        "held_at_kills": sum(held.values()),
    }


async def _check_clean(r: redis.asyncio.Redis, namespace: str) -> None:
    keys = Keys(namespace)
    assert await in_progress_lists(r, namespace) == {}
    assert await r.scard(keys.processes) == 0
    assert await r.scard(keys.queue_identities("default")) == 0
    assert await r.hlen(keys.last_beat) == 0
    assert await r.hlen(keys.queue_last_beat("default")) == 0
    assert await r.hlen(keys.beats) == 0
    assert await r.llen(keys.queue("default")) == 0
    assert await r.zcard(keys.retry("default")) == 0
    assert await r.zcard(keys.dead("default")) == 0
    assert await r.llen(keys.repeat_orphans("default")) == 0
    async for key in r.scan_iter(match=keys.orphanings_prefix("default") + "*"):
        assert await r.ttl(key) > 0, f"{key!r} has no TTL"


async def test_sigkill_storm_loses_nothing_and_reruns_only_what_the_dead_held(
    r: redis.asyncio.Redis, jobs: chaosapp.Jobs, fleet: Fleet, namespace: str
) -> None:
    size = SIZES[SCALE]
    seed = int(os.environ.get("COGWORKER_CHAOS_SEED") or random.randrange(2**32))
    print(f"seed {seed} (COGWORKER_CHAOS_SEED to replay)")
    rng = random.Random(seed)
    workers = [fleet.start(concurrency=CONCURRENCY) for _ in range(WORKERS)]
    await wait_ready(r, namespace, workers)
    tags = await _enqueue(jobs, size, rng)
    storm = Storm(r, namespace, fleet, Clock(), rng, workers)

    await _storm(storm, size, tags)
    took = storm.clock()
    await _stop_all(r, namespace, storm.workers)

    starts = await chaosapp.counts(r, chaosapp.started_key(namespace))
    finishes = await chaosapp.counts(r, chaosapp.finished_key(namespace))
    figures = _check_runs(tags, storm.kills, starts, finishes)
    back = [kill.back_after for kill in storm.kills]
    forgotten = [kill.forgotten_after for kill in storm.kills]
    report("sigkill_storm", jobs=len(tags), workers=WORKERS, concurrency=CONCURRENCY,
           kills=len(storm.kills), **figures,
           recovery_s_p50=round(statistics.median(b for b in back if b is not None), 2),
           recovery_s_max=round(max(b for b in back if b is not None), 2),
           forgotten_s_max=round(max(f for f in forgotten if f is not None), 2),
           bound_s=BOUND, seconds=round(took, 1), jobs_per_s=round(len(tags) / took))
    assert len(storm.kills) >= 2, "the jobs were done before a second kill"
    assert all(b is not None and b <= BOUND for b in back), f"recovery seconds: {back}"
    assert all(f is not None for f in forgotten), f"forgotten after: {forgotten}"
    await _check_clean(r, namespace)
