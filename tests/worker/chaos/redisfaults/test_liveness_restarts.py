"""Scenario — every workflow ends through Redis restarts (issue 40, the liveness guarantee).

The workers' own server (AOF on, ``appendfsync always``: nothing it acknowledged is lost
by Redis itself) is SIGKILLed by pid and started again on the same port and dir, on
events, not on the clock: once a ``nest`` member is inside its child batch's block (the
block then meets Redis away: its child ends abandoned, the run is retried and opens
another), and once a dependency tree's root has finished (its ack and its note are
written after the restart). Two worker processes keep running through every restart.

Workflows, all enqueued before the workers start (the test never enqueues while Redis is
away): nested batches (``nest`` members opening a child batch, beside plain members),
dependency trees (a root, a fan-out, lines, a join) and chains of 3 with pass_result,
over two queues. Jobs record their runs on the witness server (workflowapp.py).

Must hold, within ``BOUND`` seconds of the server being back the last time:
- every batch is final (each parent, each child, abandoned ones included); nothing held,
  firing or open; no job waiting or arming, no note left, nothing queued or in progress;
- each callback ran once, or once more per restart that found a run of it in flight —
  a parent's on_complete and on_success, each non-abandoned child's on_complete; an
  abandoned child's never; every plain member and tree node likewise;
- no dependent started before its parents finished; each chain step was handed its
  predecessor's value; both workers are still alive.

Short in ``make test``; ``COGWORKER_CHAOS=full`` runs more workflows and six restarts.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.worker.chaos.redisfaults import workflowapp
from tests.worker.chaos.redisfaults.conftest import (
    FULL,
    SETTINGS,
    report,
    size,
    wait_ready,
)
from tests.worker.chaos.redisfaults.faultapp import WITNESS_ENV
from tests.worker.chaos.redisfaults.test_redis_restarts import RESUME_BOUND
from tests.workerproc import WorkerProcess, worker_pool

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600 if FULL else 90),
              *([pytest.mark.chaos] if FULL else [])]

QUEUES: Final = ["default", "second"]
WORKER_SETTINGS: Final[dict[str, Any]] = {**SETTINGS, "queues": QUEUES}
NESTED, TREES, CHAINS = size(2, 8), size(2, 8), size(2, 8)
RESTARTS: Final = size(1, 3)
"""Restarts of each kind: inside a nest's block (batch b0, b1, ...), after a root (t0,
t1, ...) finished."""
NESTS: Final = 2
PLAIN: Final = 4
CHILD_MEMBERS: Final = 2
HOLD: Final = 0.3
"""Seconds a ``nest`` stays inside its child's block: a restart on its event lands there."""
FAN_OUT: Final = 3
LINE: Final = 2
CHAIN_STEPS: Final = 3
WORKERS: Final = 2
CONCURRENCY: Final = 10
OUTAGE: Final = 0.5
"""Seconds the server stays down each time (a parameter of the fault): the workers'
fetches, settles and beats fail meanwhile; shorter than orphan_threshold."""

RELAY_PASS: Final = SETTINGS["poll_interval"] * 1.5
"""The relay's longest wait between two passes (its interval, jittered up to x1.5)."""
MARGIN: Final = 10.0
"""The jobs' own runs after the restart (a retried nest, its child's members, the
callbacks and dependents after them) on a loaded 2-core machine."""
BOUND: Final = (RESUME_BOUND + SETTINGS["orphan_threshold"]
                + 2 * SETTINGS["recovery_interval"] + RELAY_PASS + MARGIN)
"""Seconds from the server back to every workflow's end: the workers work again
(``RESUME_BOUND``, as test_redis_restarts.py asserts); a fetch whose reply was lost left
a stray on an in-progress list, requeued on the second of two reconcile passes, and a
process taken for dead (none should be) is forgotten after orphan_threshold; a block
whose seal or abandon failed is let go of by its own process's next relay pass; then
the margin."""
FINAL: Final = ("success", "complete", "dead", "abandoned")


@pytest.fixture
def fleet(witness_server: ServerProcess, namespace: str
          ) -> Iterator[Callable[[str], WorkerProcess]]:
    """``fleet(url)``: a worker process of workflowapp, killed by pid at teardown."""
    with worker_pool() as workers:
        def start(url: str) -> WorkerProcess:
            worker = WorkerProcess(url, namespace, WORKER_SETTINGS,
                                   ["--concurrency", str(CONCURRENCY), "--log-level", "WARNING"],
                                   target=workflowapp.TARGET,
                                   env={WITNESS_ENV: witness_server.url})
            workers.append(worker)
            return worker.start()
        yield start


@dataclass
class Restarter:
    """SIGKILLs the server and starts it again, once per victim event."""

    server: ServerProcess
    witness: redis.asyncio.Redis
    namespace: str
    inside: set[str]
    """Nest tags: a restart once the tag is inside its child batch's block."""
    finished: set[str]
    """Tags: a restart once the tag has finished."""
    held: Counter[str] = field(default_factory=Counter)
    """tag -> restarts that found a run of it in flight."""
    used: set[str] = field(default_factory=set)
    restarts: int = 0
    up: float = 0.0
    """When the server was last back (anyio.current_time)."""

    async def watch(self) -> None:
        at = 0
        while True:
            entries = await self.witness.lrange(workflowapp.events_key(self.namespace), at, -1)
            at += len(entries)
            for entry in entries:
                kind, tag = as_bytes(entry).decode().split(" ")[:2]
                victims = self.inside if kind == "I" else self.finished if kind == "F" else ()
                if tag in victims and tag not in self.used:
                    self.used.add(tag)
                    await self.restart()
            await anyio.sleep(0.02)  # pacing the reads, not waiting on a condition

    async def restart(self) -> None:
        runs = Counter[str]()
        for entry in await self.witness.lrange(workflowapp.events_key(self.namespace), 0, -1):
            kind, tag = as_bytes(entry).decode().split(" ")[:2]
            runs[tag] += {"S": 1, "F": -1}.get(kind, 0)
        self.held.update(tag for tag, n in runs.items() if n > 0)
        self.server.kill()  # SIGKILL by pid
        await anyio.sleep(OUTAGE)  # the fault's duration, a parameter of the scenario
        await anyio.to_thread.run_sync(self.server.start)  # same port, same dir (its AOF)
        self.up = anyio.current_time()
        self.restarts += 1


@dataclass
class Plan:
    parents: list[str] = field(default_factory=list)
    after: dict[str, list[str]] = field(default_factory=dict)
    """A tree node's tag -> its parents' tags."""
    jid: dict[str, str] = field(default_factory=dict)


async def _enqueue(jobs: workflowapp.Jobs, plan: Plan, rng: random.Random) -> None:
    for b in range(NESTED):
        async with jobs.app.batch(f"nested {b}", on_complete=jobs.callback.s("complete"),
                                  on_success=jobs.callback.s("success")) as batch:
            for n in range(NESTS):
                await jobs.nest.options(queue=QUEUES[n % 2]).enqueue(
                    f"b{b}n{n}", CHILD_MEMBERS, HOLD)
            for m in range(PLAIN):
                await jobs.work.options(queue=QUEUES[m % 2]).enqueue(
                    f"b{b}m{m}", round(rng.uniform(0.05, 0.2), 3))
        plan.parents.append(batch.bid)

    async def node(tag: str, parents: list[str], queue: str, seconds: float) -> None:
        jid = await jobs.work.options(queue=queue, after=[plan.jid[p] for p in parents]
                                      ).enqueue(tag, seconds)
        assert jid is not None
        plan.jid[tag], plan.after[tag] = jid, parents

    for t in range(TREES):
        await node(f"t{t}", [], QUEUES[t % 2], 0.2)
        for c in range(FAN_OUT):
            above = f"t{t}c{c}"
            await node(above, [f"t{t}"], QUEUES[c % 2], 0.05)
            for d in range(LINE):
                tag = f"t{t}c{c}d{d}"
                join = [f"t{t}c{c - 1}"] if d == LINE - 1 and c > 0 else []
                await node(tag, [above, *join], QUEUES[(c + d) % 2], 0.05)
                above = tag
    for n in range(CHAINS):
        first = jobs.chained.options(queue=QUEUES[n % 2]).s(0, f"k{n}s0")
        steps = [jobs.chained.options(queue=QUEUES[(n + k) % 2]).s(  # type: ignore[call-arg]
                     f"k{n}s{k}")  # type: ignore[arg-type]  # the value: the step before's
                 for k in range(1, CHAIN_STEPS)]
        assert len(await jobs.app.chain(first, *steps, pass_result=True).enqueue()) == CHAIN_STEPS


async def _bids(jobs: workflowapp.Jobs, plan: Plan) -> list[str]:
    found = list(plan.parents)
    for bid in plan.parents:
        found += (await jobs.app.batch_status(bid)).children
    return found


async def _unfinished(r: redis.asyncio.Redis, jobs: workflowapp.Jobs, plan: Plan) -> list[str]:
    """What has not ended yet (empty: every workflow ended)."""
    keys = Keys(jobs.app.settings.namespace)
    left = []
    for queue in QUEUES:
        for name, count in (("waiting", await r.zcard(keys.waiting(queue))),
                            ("arming", await r.zcard(keys.arming(queue))),
                            ("notes", await r.llen(keys.batch_notes(queue))),
                            ("queued", await r.llen(keys.queue(queue))),
                            ("retry", await r.zcard(keys.retry(queue))),
                            ("unsettled", await r.llen(keys.unsettled(queue)))):
            if count:
                left.append(f"{queue}: {count} {name}")
    for name in ("batches_firing", "batches_held", "batches_open"):
        if count := await r.zcard(getattr(keys, name)):
            left.append(f"{count} {name}")
    async for key in r.scan_iter(match=keys.in_progress_pattern):
        if count := await r.llen(key):
            left.append(f"{as_bytes(key).decode()}: {count}")
    for bid in await _bids(jobs, plan):
        if (state := (await jobs.app.batch_status(bid)).state) not in FINAL:
            left.append(f"batch {bid}: {state}")
    return left


@dataclass
class Runs:
    """What the runs recorded on the witness, in one order across processes."""

    starts: Counter[str]
    held: Counter[str]
    first_start: dict[str, int] = field(default_factory=dict)
    last_finish: dict[str, int] = field(default_factory=dict)

    def once(self, tag: str) -> bool:
        """Ran once, or once more per restart that found a run of it in flight."""
        return 1 <= self.starts[tag] <= 1 + self.held[tag]

    def early(self, tag: str, parent: str) -> bool:
        """Started before ``parent``'s last finish."""
        return self.first_start.get(tag, -1) < self.last_finish.get(parent, 10**9)


async def _runs(witness: redis.asyncio.Redis, namespace: str, held: Counter[str]) -> Runs:
    runs = Runs(Counter(), held)
    for index, entry in enumerate(await witness.lrange(workflowapp.events_key(namespace), 0, -1)):
        kind, tag = as_bytes(entry).decode().split(" ")[:2]
        if kind == "S":
            runs.starts[tag] += 1
            runs.first_start.setdefault(tag, index)
        elif kind == "F":
            runs.last_finish[tag] = index
    return runs


async def _batch_problems(jobs: workflowapp.Jobs, plan: Plan, runs: Runs) -> dict[str, object]:
    problems: dict[str, object] = {}
    for b, bid in enumerate(plan.parents):
        status = await jobs.app.batch_status(bid)
        if status.state != "success" or not (runs.once(f"complete:{bid}")
                                             and runs.once(f"success:{bid}")):
            problems[bid] = (status.state, runs.starts[f"complete:{bid}"],
                             runs.starts[f"success:{bid}"])
        plain = [f"b{b}m{m}" for m in range(PLAIN) if not runs.once(f"b{b}m{m}")]
        if plain:
            problems[f"plain members of {bid}"] = {t: runs.starts[t] for t in plain}
        states = [(child, (await jobs.app.batch_status(child)).state)
                  for child in status.children]
        for child, state in states:
            ran = runs.starts[f"child:{child}"]
            if (state == "abandoned" and ran) or (state != "abandoned"
                                                  and not runs.once(f"child:{child}")):
                problems[child] = ("child", state, ran)
        if sum(state != "abandoned" for _, state in states) < NESTS:
            problems[f"children of {bid}"] = states
    return problems


def _dependency_problems(plan: Plan, runs: Runs) -> dict[str, object]:
    problems: dict[str, object] = {}
    for tag, parents in plan.after.items():
        early = [p for p in parents if runs.early(tag, p)]
        if not runs.once(tag) or early:
            problems[tag] = ("runs", runs.starts[tag], "held", runs.held[tag], "early", early)
    for n in range(CHAINS):
        for k in range(CHAIN_STEPS):
            step = f"k{n}s{k}"
            handed = [t for t in runs.starts if t.startswith(f"{step}=")]
            if handed != [f"{step}={k}"] or not runs.once(f"{step}={k}") or (
                    k and runs.early(f"{step}={k}", f"k{n}s{k - 1}={k - 1}")):
                problems[step] = ("handed", handed, runs.starts[f"{step}={k}"])
    return problems


async def test_every_workflow_ends_within_the_bound_through_redis_restarts(
    servers: Callable[..., ServerProcess], fleet: Callable[[str], WorkerProcess],
    clients: Callable[[str], redis.asyncio.Redis], witness_server: ServerProcess,
    namespace: str,
) -> None:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    server = servers(appendonly=True, extra=["--appendfsync", "always"])
    witness = clients(witness_server.url)
    jobs = workflowapp.build(server.url, namespace, **WORKER_SETTINGS)
    plan = Plan()
    restarter = Restarter(server, witness, namespace,
                          inside={f"b{b}n{b % NESTS}" for b in range(RESTARTS)},
                          finished={f"t{t}" for t in range(RESTARTS)})
    try:
        # Paused until both workers are ready: no restart while they start.
        for queue in QUEUES:
            await jobs.app.pause(queue)
        await _enqueue(jobs, plan, random.Random(seed))
        workers = [fleet(server.url) for _ in range(WORKERS)]
        await wait_ready(clients(server.url), namespace, *workers)
        for queue in QUEUES:
            await jobs.app.resume(queue)
    finally:
        await jobs.app.close()  # its connections die with the server: a new App reads
    async with anyio.create_task_group() as tg:
        tg.start_soon(restarter.watch)
        await wait_until(lambda: restarter.restarts >= 2 * RESTARTS, timeout=60, every=0.05)
        tg.cancel_scope.cancel()

    r = clients(server.url)
    reader = workflowapp.build(server.url, namespace, **WORKER_SETTINGS)
    try:
        left: list[str] = []

        async def ended() -> bool:
            for worker in workers:
                assert worker.alive(), f"worker exited with {worker.returncode}"
            left[:] = await _unfinished(r, reader, plan)
            return not left

        timeout = BOUND - (anyio.current_time() - restarter.up)
        try:
            await wait_until(ended, timeout=max(0.1, timeout), every=0.2)
        except AssertionError:
            raise AssertionError(f"not ended {BOUND:.1f} s after the server was back: "
                                 f"{left[:20]}") from None
        took = anyio.current_time() - restarter.up
        runs = await _runs(witness, namespace, restarter.held)
        problems = {**await _batch_problems(reader, plan, runs),
                    **_dependency_problems(plan, runs)}
        assert not problems, f"{len(problems)} problem(s): {dict(list(problems.items())[:20])}"
        children = [c for bid in plan.parents
                    for c in (await reader.app.batch_status(bid)).children]
        abandoned = [c for c in children
                     if (await reader.app.batch_status(c)).state == "abandoned"]
        report("liveness-restarts", nested=NESTED, trees=TREES, chains=CHAINS,
               restarts=restarter.restarts, bound=round(BOUND, 1),
               ended_after_server_back=round(took, 1), children=len(children),
               abandoned_children=len(abandoned), in_flight=sum(restarter.held.values()))
    finally:
        await reader.app.close()
