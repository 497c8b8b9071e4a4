"""Scenario — every workflow ends (issue 40, the liveness guarantee).

Workflows of every kind at once, on 3 worker processes serving 3 queues:

- nested batches: a batch whose ``nest`` members each open a child batch (its parent:
  the member's batch) beside plain members over the queues;
- dependency trees (a root, a fan-out, lines, a join) and chains with pass_result;
- a batch whose members are on a queue no worker serves, and a parent there with a
  dependent on a served queue: ``cancel_batch`` and ``cancel(parent)`` end them, and
  the ends must be relayed by some worker (the notes of an unserved queue).

Workers are SIGKILLed on events, not on the clock: a ``nest`` member while it is inside
its child batch's block, a tree's root and a chain's step once they started (each
victim frozen first and its in-progress lists read: the runs it held may go again).
Each kill starts a new worker.

Must hold, within ``BOUND`` seconds of the last kill (``BOUND``: what the settings let
recovery, the reaper and the relays take, and a margin for the jobs' own runs):
- every batch is final (parents, every child, abandoned ones included), nothing held,
  firing or open; no job waiting, arming, queued or in progress; no note left;
- each callback ran once (or once more per kill that held its run) — a parent's
  on_complete and on_success, each non-abandoned child's on_complete; an abandoned
  child's never;
- no dependent started before its parents finished; each chain step was handed its
  predecessor's value; the unserved batch ended complete, the cancelled parent's
  dependent cancelled and never started.

A second test SIGKILLs an enqueuer (a plain process, not a worker) inside its
``async with batch`` block, opened on a short lease (``hold=``): once the lease lapses
a relay pass lets go of it, and the batch ends abandoned — its members run once each,
no callback — within ``ENQUEUER_BOUND`` of the kill.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

import anyio
import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.worker.notes_relay import UNSERVED_EVERY
from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.conftest import (
    SCALE,
    Clock,
    Fleet,
    identity_of,
    marks,
    report,
    wait_ready,
)
from tests.workerproc import ROOT

pytestmark = marks(short_timeout=150, full_timeout=900)

QUEUES: Final = ["default", "second", "third"]
IDLE: Final = "idle"
"""A queue no worker serves (registered by the enqueues to it)."""
SIZES: Final = {"short": (3, 2, 3), "full": (30, 20, 30)}
"""(nested batches, trees, chains)."""
SETTINGS: Final = {**chaosapp.SETTINGS, "queues": QUEUES, "max_orphanings": 1000}
"""``max_orphanings`` out of reach: each kill takes a whole worker, so a job that is only
a bystander (a nest inside its child's block for ``HOLD`` s) can be in progress at four
of the full size's ~60 kills and be buried as poison (dead, ``ProcessDied``), its batch
dead and its dependents never run: the poison rule working as designed
(test_poison.py), not a wait that did not end. Seed 4062529708 did it, before and after
issue 42."""
NESTS: Final = 3
"""``nest`` members of a nested batch (each opens a child)."""
PLAIN: Final = 6
CHILD_MEMBERS: Final = 3
HOLD: Final = 0.5
"""Seconds a ``nest`` stays inside its child's block: a kill on its event lands there."""
FAN_OUT: Final = 4
LINE: Final = 2
CHAIN_STEPS: Final = 4
WORKERS: Final = 3
CONCURRENCY: Final = 10
ENQUEUER_MEMBERS: Final = 5

RELAY_PASS: Final = SETTINGS["poll_interval"] * 1.5
"""The relay's longest wait between two passes (its interval, jittered up to x1.5)."""
MARGIN: Final = 10.0
"""The jobs' own runs after a recovery (a rerun, the dependents and callbacks after it)
and a loaded 2-core machine."""
BOUND: Final = (2 * SETTINGS["orphan_threshold"] + SETTINGS["recovery_interval"]
                + RELAY_PASS + 2 * UNSERVED_EVERY + MARGIN)
"""Seconds from the last kill to every workflow's end: a dead worker is forgotten by
recovery (orphan threshold, a recovery pass), the reaper lets go of its blocks once it
has found it gone for the orphan threshold (a relay pass after); an unserved queue's
notes wait for one worker's turn (a lock holder killed: a second turn); then the
margin."""
ENQUEUER_BOUND: Final = chaosapp.HOLD_OPEN_LEASE + RELAY_PASS + MARGIN
"""The same for a batch whose enqueuer (not a worker) died inside its block: its lease
(``hold``, from its last add) lapses, a relay pass lets go of it; then the margin."""
FINAL: Final = ("success", "complete", "dead", "abandoned")


def _tag(payload: dict[str, object]) -> str:
    """A job's tag as its runs record it: a chain step's ``<tag>=<value>``, a callback's
    ``<kind>:<bid>``, anything else its first argument."""
    args = payload["args"]
    assert isinstance(args, list)
    if payload["class"] == "chained":
        return f"{args[1]}={args[0]}"
    if "batch_callback" in payload:
        return f"{args[0]}:{payload['bid']}"
    return str(args[0])


@dataclass
class Killer:
    """SIGKILLs the worker that records a victim's event (once per victim tag)."""

    r: redis.asyncio.Redis
    namespace: str
    fleet: Fleet
    inside: set[str]
    """Tags killed inside their child batch's block (``chaosapp.inside_key``)."""
    started: set[str]
    """Tags killed once started (``chaosapp.started_key``)."""
    held: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    last: float = 0.0
    killed: set[str] = field(default_factory=set)

    async def watch(self, clock: Clock) -> None:
        seen = {chaosapp.inside_key(self.namespace): 0, chaosapp.started_key(self.namespace): 0}
        victims = {chaosapp.inside_key(self.namespace): self.inside,
                   chaosapp.started_key(self.namespace): self.started}
        while True:
            for key, at in seen.items():
                entries = await self.r.lrange(key, at, -1)
                seen[key] += len(entries)
                for entry in entries:
                    tag, pid = as_bytes(entry).decode().split(" ")
                    if tag in victims[key] and tag not in self.killed:
                        if await self.kill(int(pid)):
                            self.killed.add(tag)
                            self.last = clock()
            await anyio.sleep(0.02)  # pacing the reads, not waiting on a condition

    async def kill(self, pid: int) -> bool:
        worker = next((w for w in self.fleet.started if w.pid == pid and w.alive()), None)
        if worker is None:
            return False  # its process is gone already: the rerun is the victim
        identity = await identity_of(self.r, self.namespace, worker)
        keys = Keys(self.namespace)
        lists = [keys.in_progress(queue, identity) for queue in QUEUES]
        worker.signal(signal.SIGSTOP)
        before = [raw for key in lists for raw in await self.r.lrange(key, 0, -1)]
        worker.kill()
        after = [raw for key in lists for raw in await self.r.lrange(key, 0, -1)]
        for tag in {_tag(json.loads(raw)) for raw in before + after}:
            self.held[tag] += 1
        self.kills += 1
        self.fleet.start(concurrency=CONCURRENCY, **SETTINGS)
        return True


@dataclass
class Plan:
    parents: list[str] = field(default_factory=list)
    """The nested batches' bids."""
    nests: list[str] = field(default_factory=list)
    after: dict[str, list[str]] = field(default_factory=dict)
    """A tree node's tag -> its parents' tags."""
    jid: dict[str, str] = field(default_factory=dict)
    roots: list[str] = field(default_factory=list)
    chains: int = 0
    idle_bid: str = ""


async def _enqueue(jobs: chaosapp.Jobs, plan: Plan, sizes: tuple[int, int, int],
                   rng: random.Random) -> None:
    nested, trees, chains = sizes
    for b in range(nested):
        async with jobs.app.batch(f"nested {b}", on_complete=jobs.callback.s("complete"),
                                  on_success=jobs.callback.s("success")) as batch:
            for n in range(NESTS):
                plan.nests.append(f"b{b}n{n}")
                await jobs.nest.options(queue=QUEUES[n % 3]).enqueue(
                    f"b{b}n{n}", CHILD_MEMBERS, HOLD)
            for m in range(PLAIN):
                await jobs.work.options(queue=QUEUES[m % 3]).enqueue(
                    f"b{b}m{m}", round(rng.uniform(0.05, 0.2), 3))
        plan.parents.append(batch.bid)

    async def node(tag: str, parents: list[str], queue: str, seconds: float) -> None:
        jid = await jobs.node.options(queue=queue, after=[plan.jid[p] for p in parents]
                                      ).enqueue(tag, seconds)
        assert jid is not None
        plan.jid[tag], plan.after[tag] = jid, parents

    for t in range(trees):
        root = f"t{t}"
        plan.roots.append(root)
        await node(root, [], QUEUES[t % 3], HOLD)
        for c in range(FAN_OUT):
            above = f"t{t}c{c}"
            await node(above, [root], QUEUES[c % 3], 0.05)
            for d in range(LINE):
                tag = f"t{t}c{c}d{d}"
                join = [f"t{t}c{c - 1}"] if d == LINE - 1 and c > 0 else []
                await node(tag, [above, *join], QUEUES[(c + d) % 3], 0.05)
                above = tag
    for n in range(chains):
        first = jobs.chained.options(queue=QUEUES[n % 3]).s(0, f"k{n}s0")
        steps = [jobs.chained.options(queue=QUEUES[(n + k) % 3]).s(  # type: ignore[call-arg]
                     f"k{n}s{k}")  # type: ignore[arg-type]  # the value: the step before's
                 for k in range(1, CHAIN_STEPS)]
        assert len(await jobs.app.chain(first, *steps, pass_result=True).enqueue()) == CHAIN_STEPS
    plan.chains = chains


async def _enqueue_idle(jobs: chaosapp.Jobs, plan: Plan) -> None:
    """A batch on the queue no worker serves."""
    async with jobs.app.batch("idle", on_complete=jobs.callback.s("complete")) as batch:
        for m in range(4):
            await jobs.work.options(queue=IDLE).enqueue(f"i{m}", 0.05)
    plan.idle_bid = batch.bid


async def _bids(jobs: chaosapp.Jobs, plan: Plan) -> list[str]:
    """Every batch of the plan: the nested ones, each child of theirs, the idle one."""
    found = [*plan.parents, plan.idle_bid]
    for bid in plan.parents:
        found += (await jobs.app.batch_status(bid)).children
    return found


async def _unfinished(r: redis.asyncio.Redis, jobs: chaosapp.Jobs, plan: Plan) -> list[str]:
    """What has not ended yet (empty: every workflow ended)."""
    keys = Keys(jobs.app.settings.namespace)
    left = []
    for queue in [*QUEUES, IDLE]:
        for name, count in (("waiting", await r.zcard(keys.waiting(queue))),
                            ("arming", await r.zcard(keys.arming(queue))),
                            ("notes", await r.llen(keys.batch_notes(queue))),
                            # an unserved queue keeps a cancelled job's copy until a fetch
                            # drops it (cancel.lua): not a wait
                            ("queued", await r.llen(keys.queue(queue)) if queue != IDLE else 0)):
            if count:
                left.append(f"{queue}: {count} {name}")
    for name in ("batches_firing", "batches_held", "batches_open"):
        if count := await r.zcard(getattr(keys, name)):
            left.append(f"{count} {name}")
    async for key in r.scan_iter(match=keys.in_progress_pattern):
        if count := await r.llen(key):
            left.append(f"{key.decode()}: {count}")
    for bid in await _bids(jobs, plan):
        if (state := (await jobs.app.batch_status(bid)).state) not in FINAL:
            left.append(f"batch {bid}: {state}")
    return left


@dataclass
class Runs:
    """What the runs recorded: starts per tag, and the order of the tree's and chains'
    starts and finishes (one list: one order across processes)."""

    starts: Counter[str]
    held: Counter[str]
    first_start: dict[str, int] = field(default_factory=dict)
    last_finish: dict[str, int] = field(default_factory=dict)

    def once(self, tag: str) -> bool:
        """Ran once, or once more per kill that held a run of it."""
        return 1 <= self.starts[tag] <= 1 + self.held[tag]

    def early(self, tag: str, parent: str) -> bool:
        """Started before ``parent``'s last finish."""
        return self.first_start.get(tag, -1) < self.last_finish.get(parent, 10**9)


async def _runs(r: redis.asyncio.Redis, namespace: str, held: Counter[str]) -> Runs:
    runs = Runs(await chaosapp.counts(r, chaosapp.started_key(namespace)), held)
    for index, entry in enumerate(await r.lrange(chaosapp.events_key(namespace), 0, -1)):
        kind, tag = as_bytes(entry).decode().split(" ", 1)
        if kind == "S":
            runs.first_start.setdefault(tag, index)
        else:
            runs.last_finish[tag] = index
    return runs


async def _batch_problems(jobs: chaosapp.Jobs, plan: Plan, runs: Runs) -> dict[str, object]:
    """Each nested batch succeeded, its callbacks and its children's ran once, an
    abandoned child's never; the unserved batch ended complete, its callback once."""
    problems: dict[str, object] = {}
    for bid in plan.parents:
        status = await jobs.app.batch_status(bid)
        if status.state != "success" or not (runs.once(f"complete:{bid}")
                                             and runs.once(f"success:{bid}")):
            problems[bid] = (status.state, runs.starts[f"complete:{bid}"],
                             runs.starts[f"success:{bid}"])
        states = [(child, (await jobs.app.batch_status(child)).state)
                  for child in status.children]
        for child, state in states:
            ran = runs.starts[f"child:{child}"]
            if (state == "abandoned" and ran) or (state != "abandoned"
                                                  and not runs.once(f"child:{child}")):
                problems[child] = ("child", state, ran)
        if sum(state != "abandoned" for _, state in states) < NESTS:
            problems[f"children of {bid}"] = states
    idle = await jobs.app.batch_status(plan.idle_bid)
    if idle.state != "complete" or not runs.once(f"complete:{plan.idle_bid}"):
        problems["idle batch"] = (idle.state, runs.starts[f"complete:{plan.idle_bid}"])
    return problems


def _dependency_problems(plan: Plan, runs: Runs) -> dict[str, object]:
    """Each tree node ran once, after its parents; each chain step was handed its
    predecessor's value, after it."""
    problems: dict[str, object] = {}
    for tag, parents in plan.after.items():
        early = [p for p in parents if runs.early(tag, p)]
        if not runs.once(tag) or early:
            problems[tag] = ("runs", runs.starts[tag], "held", runs.held[tag], "early", early)
    for n in range(plan.chains):
        for k in range(CHAIN_STEPS):
            step = f"k{n}s{k}"
            handed = [t for t in runs.starts if t.startswith(f"{step}=")]
            if handed != [f"{step}={k}"] or (k and runs.early(step, f"k{n}s{k - 1}")):
                problems[step] = ("handed", handed)
    return problems


async def test_every_workflow_ends_within_the_bound_when_workers_die_on_events(
    r: redis.asyncio.Redis, fleet: Fleet, server: object, namespace: str,
) -> None:
    seed = int(os.environ.get("COGWORKER_CHAOS_SEED") or random.randrange(2**32))
    print(f"seed {seed} (COGWORKER_CHAOS_SEED to replay)")
    rng = random.Random(seed)
    nested, trees, chains = sizes = SIZES[SCALE]
    jobs = chaosapp.build(fleet.url, namespace, queues=QUEUES)
    plan = Plan()
    # Victims: a nest of every nested batch inside its block, each tree's root, every
    # third chain's second step, once started.
    killer = Killer(r, namespace, fleet,
                    inside={f"b{b}n{rng.randrange(NESTS)}" for b in range(nested)},
                    started={*(f"t{t}" for t in range(trees)),
                             *(f"k{n}s1=1" for n in range(0, chains, 3))})
    planned = len(killer.inside) + len(killer.started)
    try:
        workers = [fleet.start(concurrency=CONCURRENCY, **SETTINGS) for _ in range(WORKERS)]
        await wait_ready(r, namespace, workers)
        clock = Clock()
        async with anyio.create_task_group() as tg:
            tg.start_soon(killer.watch, clock)
            await _enqueue_idle(jobs, plan)
            await _enqueue(jobs, plan, sizes, rng)
            await wait_until(lambda: killer.kills >= 1, timeout=60, every=0.05)
            # The unserved queue's ends, asked for while the storm goes on.
            await jobs.app.cancel_batch(plan.idle_bid)
            cancelled_at = clock()
            await wait_until(lambda: killer.kills >= planned, timeout=90, every=0.05)
            tg.cancel_scope.cancel()
        last = max(killer.last, cancelled_at)
        left: list[str] = []

        async def ended() -> bool:
            left[:] = await _unfinished(r, jobs, plan)
            return not left

        try:
            await wait_until(ended, timeout=max(0.1, BOUND - (clock() - last)), every=0.2)
        except AssertionError:
            raise AssertionError(f"not ended {BOUND:.1f} s after the last kill: {left[:20]}"
                                 ) from None
        took = clock() - last
        runs = await _runs(r, namespace, killer.held)
        problems = {**await _batch_problems(jobs, plan, runs),
                    **_dependency_problems(plan, runs)}
        assert not problems, f"{len(problems)} problem(s): {dict(list(problems.items())[:20])}"
        report("liveness_storm", nested=nested, trees=trees, chains=chains, kills=killer.kills,
               bound=round(BOUND, 1), ended_after_last_kill=round(took, 1),
               seconds=round(clock(), 1))
    finally:
        await jobs.app.close()


DEPENDENT_BOUND: Final = RELAY_PASS + 2 * UNSERVED_EVERY + MARGIN
"""Seconds a cancelled parent's end may take to reach its dependents (an unserved
queue's notes: a worker's turn)."""


@pytest.mark.parametrize("where", ["unserved", "paused"])
async def test_the_dependent_of_a_parent_cancelled_while_queued_ends_within_the_bound(
    server: ServerProcess, namespace: str, where: str,
) -> None:
    """A parent cancelled while its copy is still on its queue (no worker serves that
    queue, or it is paused): its dependent, on a served queue, is cancelled — not left
    waiting for good (issue 40, defect 5). The copy stays until a fetch drops it
    (cancel.lua), and so does its live record."""
    jobs = chaosapp.build(server.url, namespace, queues=QUEUES)
    try:
        queue = IDLE if where == "unserved" else QUEUES[1]
        if where == "paused":
            await jobs.app.pause(queue)
        parent = await jobs.node.options(queue=queue).enqueue("parent", 0.05)
        assert parent is not None
        dependent = await jobs.node.options(queue=QUEUES[0], after=[parent]).enqueue(
            "dependent", 0.05)
        assert dependent is not None
        async with jobs.app.worker(concurrency=2):
            assert await jobs.app.cancel(parent) == "cancelled"
            try:
                await wait_until(lambda: _state(jobs, dependent, "cancelled"),
                                 timeout=DEPENDENT_BOUND, every=0.1)
            except AssertionError:
                state = (await jobs.app.status(dependent)).state
                raise AssertionError(f"the dependent is still {state} {DEPENDENT_BOUND:.1f} s "
                                     f"after its parent was cancelled") from None
    finally:
        await jobs.app.close()


async def _state(jobs: chaosapp.Jobs, jid: str, state: str) -> bool:
    return (await jobs.app.status(jid)).state == state


async def test_a_batch_whose_enqueuer_dies_inside_its_block_ends_within_the_bound(
    r: redis.asyncio.Redis, fleet: Fleet, server: object, namespace: str,
) -> None:
    jobs = chaosapp.build(fleet.url, namespace, queues=QUEUES)
    enqueuer: subprocess.Popen[bytes] | None = None
    try:
        workers = [fleet.start(concurrency=CONCURRENCY, **SETTINGS) for _ in range(2)]
        await wait_ready(r, namespace, workers)
        code = ("import sys, anyio; from tests.worker.chaos.processes import chaosapp; "
                "anyio.run(chaosapp.hold_open, sys.argv[1], sys.argv[2], int(sys.argv[3]))")
        enqueuer = subprocess.Popen([sys.executable, "-c", code, fleet.url, namespace,
                                     str(ENQUEUER_MEMBERS)], cwd=ROOT)
        inside = chaosapp.inside_key(namespace)
        await wait_until(lambda: _said(r, inside), timeout=30, every=0.05)
        bid, pid = as_bytes(await r.lindex(inside, 0) or b"").decode().split(" ")
        assert int(pid) == enqueuer.pid
        # Its members ran (none left pending for the end to cancel: each runs once),
        # then the enqueuer dies inside its block.
        finished = chaosapp.finished_key(namespace)
        await wait_until(lambda: _count(r, finished, ENQUEUER_MEMBERS), timeout=30)
        enqueuer.kill()  # SIGKILL, inside its block
        enqueuer.wait()
        clock = Clock()
        try:
            await wait_until(lambda: _final(jobs, bid), timeout=max(0.1, ENQUEUER_BOUND - clock()),
                             every=0.2)
        except AssertionError:
            state = (await jobs.app.batch_status(bid)).state
            raise AssertionError(f"batch {bid} still {state} {ENQUEUER_BOUND:.1f} s after "
                                 "its enqueuer died inside its block") from None
        status = await jobs.app.batch_status(bid)
        assert (status.state, status.callbacks) == ("abandoned", {}), status
        # A callback would have been named in the step that ended the batch (none is):
        # only the members ever started, once each.
        started = await chaosapp.counts(r, chaosapp.started_key(namespace))
        assert started == Counter(f"e{m}" for m in range(ENQUEUER_MEMBERS)), started
        report("liveness_enqueuer", bound=round(ENQUEUER_BOUND, 1),
               ended_after_kill=round(clock(), 1))
    finally:
        if enqueuer is not None and enqueuer.poll() is None:
            enqueuer.kill()
            enqueuer.wait()
        await jobs.app.close()


async def _said(r: redis.asyncio.Redis, key: str) -> bool:
    return bool(await r.llen(key))


async def _count(r: redis.asyncio.Redis, key: str, at_least: int) -> bool:
    return int(await r.llen(key)) >= at_least


async def _final(jobs: chaosapp.Jobs, bid: str) -> bool:
    return (await jobs.app.batch_status(bid)).state in FINAL

