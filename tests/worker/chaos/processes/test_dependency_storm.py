"""Scenario — dependency trees and chains under a SIGKILL storm.

Trees of depth 5 over 3 queues: a root, 10 children after it (a fan-out), and under each
child a line of 3 more levels, the last of which also waits for its line's sibling
(two parents: a join); every fifth tree has one child that dies. Chains of 5 steps with
pass_result, each step handing on a counter. 4 worker processes, one SIGKILLed every
2 s (as in test_batch_storm.py).

Must hold:
- no job ran before its parents: each job's first start comes after every finish of
  each of its parents (one Redis list orders every start and finish);
- every job whose ancestors all succeed runs; each job of a dead child's subtree is
  cancelled and never starts;
- released once: a job starts once, or once more per kill that held it;
- each chain step was handed the value of the step before it (k for step k);
- and at the end nothing waits: no job waiting or arming, no note left.
"""

from __future__ import annotations

import itertools
import json
import os
import random
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
    marks,
    report,
    wait_ready,
)
from tests.worker.chaos.processes.test_batch_storm import Storm

pytestmark = marks(short_timeout=180, full_timeout=900)

QUEUES: Final = ["default", "second", "third"]
SIZES: Final = {"short": (8, 16, 3), "full": (150, 300, None)}
"""(trees, chains, kills: None = every KILL_EVERY s while jobs wait)."""
FAN_OUT: Final = 10
LINE: Final = 3
CHAIN_STEPS: Final = 5
WORKERS: Final = 4
CONCURRENCY: Final = 10
KILL_EVERY: Final = {"short": 0.75, "full": 2.0}[SCALE]
"""Seconds between kills: the short run's jobs are done in a few seconds, and it must see
a second kill (its last assertion) however fast the machine."""
SETTINGS: Final = {**chaosapp.SETTINGS, "queues": QUEUES}


def _tags(raws: list[bytes | str]) -> list[str]:
    """A node's tag (its first argument), a chain step's ``<tag>=<value>``."""
    found = []
    for raw in raws:
        payload = json.loads(raw)
        args = payload["args"]
        found.append(f"{args[1]}={args[0]}" if payload["class"] == "chained" else str(args[0]))
    return found


class Plan:
    """What was enqueued: each job's tag, its parents' tags, and which must not run."""

    def __init__(self) -> None:
        self.parents: dict[str, list[str]] = {}
        self.doomed: set[str] = set()
        """Tags of jobs that die, and of every job under one (cancelled, never run)."""
        self.dying: set[str] = set()
        self.jid: dict[str, str] = {}
        self.chains: list[list[str]] = []


async def _enqueue(jobs: chaosapp.Jobs, trees: int, chains: int, rng: random.Random) -> Plan:
    plan = Plan()

    async def add(tag: str, parents: list[str], queue: str, *, dies: bool = False) -> None:
        job = jobs.fail if dies else jobs.node
        options = job.options(queue=queue, after=[plan.jid[p] for p in parents])
        jid = await options.enqueue(tag, round(rng.uniform(0.05, 0.2), 3))
        assert jid is not None
        plan.jid[tag], plan.parents[tag] = jid, parents
        if dies:
            plan.dying.add(tag)
        if dies or any(p in plan.doomed for p in parents):
            plan.doomed.add(tag)

    for t in range(trees):
        root = f"t{t}"
        await add(root, [], QUEUES[t % 3])
        for c in range(FAN_OUT):
            above = f"t{t}c{c}"
            await add(above, [root], QUEUES[c % 3], dies=t % 5 == 4 and c == 3)
            for depth in range(LINE):
                tag = f"t{t}c{c}d{depth}"
                parents = [above]
                if depth == LINE - 1 and c > 0:  # a join: also its sibling line's top
                    parents.append(f"t{t}c{c - 1}")
                await add(tag, parents, QUEUES[(c + depth) % 3])
                above = tag
    for n in range(chains):
        steps = [jobs.chained.options(queue=QUEUES[(n + k) % 3]).s(f"k{n}s{k}")
                 for k in range(CHAIN_STEPS)]
        first = jobs.chained.options(queue=QUEUES[n % 3]).s(0, f"k{n}s0")
        plan.chains.append(await jobs.app.chain(first, *steps[1:], pass_result=True).enqueue())
    return plan


async def _settled(r: redis.asyncio.Redis, namespace: str) -> bool:
    keys = Keys(namespace)
    for queue in QUEUES:
        if any([await r.llen(keys.queue(queue)), await r.llen(keys.batch_notes(queue)),
                await r.zcard(keys.waiting(queue)), await r.zcard(keys.arming(queue))]):
            return False
    async for key in r.scan_iter(match=keys.in_progress_pattern):
        if await r.llen(key):
            return False
    return True


async def _order(r: redis.asyncio.Redis, namespace: str) -> tuple[dict[str, int], dict[str, int]]:
    """tag -> index of its first start, tag -> index of its last finish."""
    first_start: dict[str, int] = {}
    last_finish: dict[str, int] = {}
    for index, entry in enumerate(await r.lrange(chaosapp.events_key(namespace), 0, -1)):
        kind, tag = entry.decode().split(" ", 1)
        if kind == "S":
            first_start.setdefault(tag, index)
        else:
            last_finish[tag] = index
    return first_start, last_finish


async def _storm(r: redis.asyncio.Redis, namespace: str, jobs: chaosapp.Jobs, storm: Storm,
                 kills: int | None, sizes: tuple[int, int], rng: random.Random) -> Plan:
    """Enqueue the plan while the kills go on (from the first second), until every job
    ran or the kills are done; the plan."""
    keys = Keys(namespace)
    clock = Clock()
    plan_box: list[Plan] = []
    async with anyio.create_task_group() as tg:

        async def enqueue() -> None:
            plan_box.append(await _enqueue(jobs, *sizes, rng))

        tg.start_soon(enqueue)
        next_kill = clock() + 1.0
        while kills is None or storm.kills < kills:
            await anyio.sleep(max(0.0, next_kill - clock()))  # pacing, not waiting
            waiting = [await r.llen(keys.queue(q)) + await r.zcard(keys.waiting(q))
                       for q in QUEUES]
            if plan_box and not any(waiting):
                break
            next_kill = next_kill + KILL_EVERY if await storm.kill_one() else clock() + 0.1
    return plan_box[0]


async def _problems(r: redis.asyncio.Redis, namespace: str, jobs: chaosapp.Jobs, plan: Plan,
                    storm: Storm) -> dict[str, object]:
    starts = await chaosapp.counts(r, chaosapp.started_key(namespace))
    finishes = await chaosapp.counts(r, chaosapp.finished_key(namespace))
    first_start, last_finish = await _order(r, namespace)

    def before(tag: str, parent: str) -> bool:
        return first_start.get(tag, -1) < last_finish.get(parent, 10**9)

    problems: dict[str, object] = {}
    for tag, parents in plan.parents.items():
        if tag in plan.doomed and tag not in plan.dying:
            state = (await jobs.app.status(plan.jid[tag])).state
            if starts[tag] or state != "cancelled":
                problems[tag] = ("under a dead parent", starts[tag], state)
        elif tag not in plan.dying and finishes[tag] < 1:
            problems[tag] = "never finished"
        elif not 1 <= starts[tag] <= 1 + storm.held[tag]:
            problems[tag] = ("runs", starts[tag], "held", storm.held[tag])
        elif tag not in plan.dying and any(before(tag, p) for p in parents):
            problems[tag] = "started before a parent finished"  # (a ``fail`` job: not ordered)
    for n, k in itertools.product(range(len(plan.chains)), range(CHAIN_STEPS)):
        step = f"k{n}s{k}"
        handed = [t for t in starts if t.startswith(f"{step}=")]
        if handed != [f"{step}={k}"] or (k and before(step, f"k{n}s{k - 1}")):
            problems[step] = ("handed", handed, "first start", first_start.get(step))
    return problems


async def test_every_job_runs_once_after_its_parents_through_a_sigkill_storm(
    r: redis.asyncio.Redis, fleet: Fleet, server: object, namespace: str,
) -> None:
    trees, chains, kills = SIZES[SCALE]
    seed = int(os.environ.get("COGWORKER_CHAOS_SEED") or random.randrange(2**32))
    print(f"seed {seed} (COGWORKER_CHAOS_SEED to replay)")
    rng = random.Random(seed)
    jobs = chaosapp.build(fleet.url, namespace, queues=QUEUES)
    try:
        workers = [fleet.start(concurrency=CONCURRENCY, **SETTINGS) for _ in range(WORKERS)]
        await wait_ready(r, namespace, workers)
        clock = Clock()
        storm = Storm(r, namespace, fleet, rng, workers, tags=_tags)
        plan = await _storm(r, namespace, jobs, storm, kills, (trees, chains), rng)
        await wait_until(lambda: _settled(r, namespace), timeout=120, every=0.2)
        took = clock()
        problems = await _problems(r, namespace, jobs, plan, storm)
        assert not problems, f"{len(problems)} problem(s): {dict(list(problems.items())[:20])}"
        starts = await chaosapp.counts(r, chaosapp.started_key(namespace))
        report("dependency_storm", trees=trees, chains=chains, jobs=len(plan.parents)
               + chains * CHAIN_STEPS, kills=storm.kills, doomed=len(plan.doomed),
               reruns=sum(c - 1 for c in starts.values() if c > 1), seconds=round(took, 1))
        assert all(len(jids) == CHAIN_STEPS for jids in plan.chains)
        assert storm.kills >= 2, "the jobs were done before a second kill"
    finally:
        await jobs.app.close()
