"""Scenario — outboxed workflow members end (issue 40, the liveness guarantee).

The relay runs inside a worker process (``App(outbox=...)``, the real CLI, SQLite),
SIGKILLed on events, not on the clock, and started again; rows are committed while no
relay runs (they wait), and just before each kill (some are caught mid-pass).

(a) Outboxed jobs that open a batch inside the job (``jobs.batch(...)``, as outbox.py
    says to write it) and add members: the relay's worker is killed while an opener is
    inside its block. Within ``BOUND`` seconds of the new worker being ready: every row
    relayed, every batch final (an opener's batch killed inside its block ends
    abandoned, no callback; its recovered run opens another), nothing held, firing,
    open, waiting or in progress; each opener has a batch that succeeded, whose
    callbacks and members ran once (or once more per kill that found a run in flight).

(b) An outboxed parent and a dependent (``options(after=[jid])``): while the parent is
    only a row, the dependent is refused at the call (its jid is not known to Redis
    yet: ValueError, nothing left waiting); once the row is relayed, the dependent is
    enqueued, the worker killed while the parent runs, a second parent's row waits
    through the kill: each dependent runs once, after its parent, within ``BOUND``.
"""

from __future__ import annotations

import functools
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import pytest
import redis.asyncio
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from cogworker_async import outbox as outbox_module
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from tests.outbox import livenessapp
from tests.outbox.outboxapp import DB_ENV
from tests.waiting import wait_until
from tests.workerproc import WorkerProcess, worker_pool

FULL: Final = os.environ.get("COGWORKER_CHAOS", "").strip().lower() == "full"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600 if FULL else 90),
              *([pytest.mark.chaos] if FULL else [])]
"""As the chaos scenarios' (tests/worker/chaos/processes/conftest.py, ``marks``): short
in ``make test``; ``COGWORKER_CHAOS=full`` runs more kills (and marks it ``chaos``)."""

SETTINGS: Final[dict[str, Any]] = {
    "poll_interval": 0.1,
    "retry_base_delay": 0.0,
    "shutdown_timeout": 2.0,
    "idle_fetch_interval": 0.2,
    "heartbeat_interval": 0.3,
    "orphan_threshold": 2.0,
    "recovery_interval": 0.5,
}
"""Fast, as the process chaos tests' (chaosapp.SETTINGS): a worker dead 2 s after its
last beat."""
KILLS: Final = 3 if FULL else 1
OPENERS_PER_GROUP: Final = 6 if FULL else 3
"""Openers committed at the start, just before each kill, and after each kill."""
MEMBERS: Final = 3
HOLD: Final = 0.5
"""Seconds an opener stays inside its block: a kill on its event lands there."""
PARENT_SECONDS: Final = 1.0
"""A parent's run: a kill on its start lands inside it."""
CONCURRENCY: Final = 10
READY_TIMEOUT: Final = 20.0

RELAY_PASS: Final = SETTINGS["poll_interval"] * 1.5
"""The batch and dependents relay's longest wait between two passes (jittered x1.5)."""
OUTBOX_PASS: Final = livenessapp.OUTBOX_INTERVAL * 1.5
MARGIN: Final = 10.0
"""The jobs' own runs after the recovery (a rerun, its batch's members and callbacks,
the dependents) on a loaded 2-core machine."""
BOUND: Final = (SETTINGS["orphan_threshold"] + SETTINGS["recovery_interval"] + RELAY_PASS
                + OUTBOX_PASS + MARGIN)
"""Seconds from the new worker ready to every workflow's end: the waiting rows go in its
first outbox passes; the dead worker is forgotten by recovery (orphan threshold, a pass)
and its runs go again; the reaper lets go of its blocks at the next relay pass; the
notes of every end are relayed each pass; then the margin."""
FINAL: Final = ("success", "complete", "dead", "abandoned")


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'app.sqlite'}"


@pytest.fixture
async def jobs(redis_url: str, namespace: str, db: str) -> AsyncIterator[livenessapp.Jobs]:
    built = livenessapp.build(redis_url, namespace, db, **SETTINGS)
    engine = built.app.settings.outbox.engine
    async with engine.begin() as conn:
        await conn.run_sync(outbox_module.DEFAULT_TABLE.metadata.create_all)
    yield built
    await built.app.close()
    await engine.dispose()


@pytest.fixture
async def r(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def relays(redis_url: str, namespace: str, db: str) -> Iterator[Callable[[], WorkerProcess]]:
    """``relays()``: a new worker process of livenessapp (it relays the outbox)."""
    with worker_pool() as workers:
        def start() -> WorkerProcess:
            worker = WorkerProcess(redis_url, namespace, SETTINGS,
                                   ["--concurrency", str(CONCURRENCY), "--log-level", "WARNING"],
                                   target=livenessapp.TARGET, env={DB_ENV: db})
            workers.append(worker)
            return worker.start()
        yield start


async def _ready(r: redis.asyncio.Redis, namespace: str, worker: WorkerProcess) -> None:
    """Until the worker listens for wake-ups (the only one: its Manager runs)."""

    async def listening() -> bool:
        assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        ((_, count),) = await r.pubsub_numsub(Keys(namespace).wake_channel)
        return int(count) >= 1

    await wait_until(listening, timeout=READY_TIMEOUT, every=0.05)


async def _events(r: redis.asyncio.Redis, namespace: str) -> list[list[str]]:
    return [as_bytes(entry).decode().split(" ")
            for entry in await r.lrange(livenessapp.events_key(namespace), 0, -1)]


async def _in_flight(r: redis.asyncio.Redis, namespace: str) -> list[str]:
    """Tags started and not finished (read after a kill: what the victim held)."""
    runs = Counter[str]()
    for kind, tag, *_ in await _events(r, namespace):
        runs[tag] += {"S": 1, "F": -1}.get(kind, 0)
    return [tag for tag, n in runs.items() if n > 0]


async def _rows(jobs: livenessapp.Jobs) -> int:
    engine = jobs.app.settings.outbox.engine
    async with engine.connect() as conn:
        return int((await conn.execute(
            select(func.count()).select_from(outbox_module.DEFAULT_TABLE))).scalar_one())


async def _jids(jobs: livenessapp.Jobs) -> list[str]:
    """The jids of the rows still in the outbox."""
    async with jobs.app.settings.outbox.engine.connect() as conn:
        return [row.jid for row in (await conn.execute(
            select(outbox_module.DEFAULT_TABLE.c.jid))).all()]


async def _outbox(jobs: livenessapp.Jobs, *signatures: Any) -> list[str]:
    """Each signature's job written as an outbox row, in one committed transaction."""
    engine = jobs.app.settings.outbox.engine
    jids = []
    async with AsyncSession(engine) as session, session.begin():
        for sig in signatures:
            jid = await outbox_module.enqueue(session, sig)
            assert jid is not None
            jids.append(jid)
    return jids


async def _kill(worker: WorkerProcess) -> None:
    worker.signal(signal.SIGKILL)
    assert await worker.wait_exit(10) == -signal.SIGKILL


async def _unfinished(r: redis.asyncio.Redis, jobs: livenessapp.Jobs,
                      bids: list[str]) -> list[str]:
    """What has not ended yet (empty: every workflow ended)."""
    keys = Keys(jobs.app.settings.namespace)
    left = []
    if rows := await _rows(jobs):
        left.append(f"{rows} outbox rows")
    for name, count in (("waiting", await r.zcard(keys.waiting("default"))),
                        ("arming", await r.zcard(keys.arming("default"))),
                        ("notes", await r.llen(keys.batch_notes("default"))),
                        ("queued", await r.llen(keys.queue("default"))),
                        ("retry", await r.zcard(keys.retry("default")))):
        if count:
            left.append(f"{count} {name}")
    for name in ("batches_firing", "batches_held", "batches_open"):
        if count := await r.zcard(getattr(keys, name)):
            left.append(f"{count} {name}")
    async for key in r.scan_iter(match=keys.in_progress_pattern):
        if count := await r.llen(key):
            left.append(f"{as_bytes(key).decode()}: {count}")
    for bid in bids:
        if (state := (await jobs.app.batch_status(bid)).state) not in FINAL:
            left.append(f"batch {bid}: {state}")
    return left


async def _wait_ended(condition: Callable[[], Any], left: list[str], up: float) -> float:
    """Wait for ``condition`` within BOUND of ``up`` (anyio.current_time); the seconds it took."""
    try:
        await wait_until(condition, timeout=max(0.1, BOUND - (anyio.current_time() - up)),
                         every=0.2)
    except AssertionError:
        raise AssertionError(f"not ended {BOUND:.1f} s after the new worker was ready: "
                             f"{left[:20]}") from None
    return anyio.current_time() - up


@dataclass
class Runs:
    starts: Counter[str]
    held: Counter[str]
    first_start: dict[str, int] = field(default_factory=dict)
    last_finish: dict[str, int] = field(default_factory=dict)
    opened: dict[str, list[str]] = field(default_factory=dict)
    """An opener's tag -> the bids its runs opened."""

    def once(self, tag: str) -> bool:
        return 1 <= self.starts[tag] <= 1 + self.held[tag]


async def _runs(r: redis.asyncio.Redis, namespace: str, held: Counter[str]) -> Runs:
    runs = Runs(Counter(), held)
    for index, (kind, tag, *rest) in enumerate(await _events(r, namespace)):
        if kind == "S":
            runs.starts[tag] += 1
            runs.first_start.setdefault(tag, index)
        elif kind == "F":
            runs.last_finish[tag] = index
        elif kind == "O":
            runs.opened.setdefault(tag, []).append(rest[-1])
    return runs


@dataclass
class Storm:
    """Outboxed openers, committed in groups; the relay's worker killed on their events."""

    r: redis.asyncio.Redis
    jobs: livenessapp.Jobs
    relays: Callable[[], WorkerProcess]
    namespace: str
    tags: list[str] = field(default_factory=list)
    held: Counter[str] = field(default_factory=Counter)
    waited: int = 0
    """The most rows left waiting for a relay at once."""

    async def group(self) -> None:
        new = [f"o{len(self.tags) + n}" for n in range(OPENERS_PER_GROUP)]
        self.tags.extend(new)
        await _outbox(self.jobs, *(self.jobs.opener.s(tag, MEMBERS, HOLD) for tag in new))

    async def run(self) -> tuple[WorkerProcess, float]:
        """The last worker and when it was ready (anyio.current_time), after KILLS kills."""
        await self.group()
        worker = self.relays()
        await _ready(self.r, self.namespace, worker)
        seen, up = 0, 0.0
        for _ in range(KILLS):
            await wait_until(functools.partial(self._inside, worker, seen), timeout=30,
                             every=0.02)
            await self.group()  # committed just before the kill: some mid-pass
            await _kill(worker)
            self.held.update(await _in_flight(self.r, self.namespace))
            seen = len(await _events(self.r, self.namespace))
            await self.group()  # committed while no relay runs: they wait
            self.waited = max(self.waited, await _rows(self.jobs))
            worker = self.relays()
            await _ready(self.r, self.namespace, worker)
            up = anyio.current_time()
        return worker, up

    async def _inside(self, worker: WorkerProcess, seen: int) -> bool:
        """An opener inside its block, after the ``seen`` events of before the last kill."""
        assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        return any(kind == "O" for kind, *_ in (await _events(self.r, self.namespace))[seen:])


async def _opener_problems(jobs: livenessapp.Jobs, runs: Runs) -> dict[str, object]:
    """An abandoned batch's callbacks never ran; a batch that succeeded ran its
    callbacks and members once; each opener has a batch that succeeded."""
    problems: dict[str, object] = {}
    for tag, bids in runs.opened.items():
        states = {bid: (await jobs.app.batch_status(bid)).state for bid in bids}
        for bid, state in states.items():
            callbacks = [runs.starts[f"complete:{bid}"], runs.starts[f"success:{bid}"]]
            members = [f"{tag}m{m}@{bid}" for m in range(MEMBERS)]
            if state == "abandoned" and any(callbacks):
                problems[bid] = ("abandoned, yet its callbacks ran", callbacks)
            elif state == "success" and not (
                    runs.once(f"complete:{bid}") and runs.once(f"success:{bid}")
                    and all(runs.once(m) for m in members)):
                problems[bid] = ("callbacks", callbacks, "members",
                                 [runs.starts[m] for m in members])
            elif state not in ("success", "abandoned"):
                problems[bid] = state
        if "success" not in states.values():
            problems[tag] = ("no batch of this opener succeeded", states)
    return problems


async def test_outboxed_jobs_opening_batches_end_when_their_relay_dies(
    r: redis.asyncio.Redis, jobs: livenessapp.Jobs, relays: Callable[[], WorkerProcess],
    namespace: str,
) -> None:
    storm = Storm(r, jobs, relays, namespace)
    worker, up = await storm.run()
    assert storm.waited >= OPENERS_PER_GROUP  # rows waited for a relay through each kill
    left: list[str] = []

    async def ended() -> bool:
        assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        runs = await _runs(r, namespace, storm.held)
        left[:] = await _unfinished(r, jobs, [b for found in runs.opened.values() for b in found])
        if missing := [tag for tag in storm.tags if tag not in runs.opened]:
            left.append(f"openers never inside their block: {missing}")
        return not left

    took = await _wait_ended(ended, left, up)
    runs = await _runs(r, namespace, storm.held)
    problems = await _opener_problems(jobs, runs)
    assert not problems, f"{len(problems)} problem(s): {dict(list(problems.items())[:20])}"
    print(f"CHAOS outbox-liveness openers={len(runs.opened)} kills={KILLS} "
          f"abandoned={sum(len(b) for b in runs.opened.values()) - len(runs.opened)} "
          f"bound={BOUND:.1f} ended_after_ready={took:.1f}")


async def test_an_outboxed_parent_s_dependent_runs_after_it_when_the_relay_dies(
    r: redis.asyncio.Redis, jobs: livenessapp.Jobs, relays: Callable[[], WorkerProcess],
    namespace: str,
) -> None:
    keys = Keys(namespace)
    (first,) = await _outbox(jobs, jobs.node.s("p1", PARENT_SECONDS))
    # While the parent is only a row, Redis does not know its jid: the dependent is
    # refused at the call (never left waiting for a parent that may never come).
    with pytest.raises(ValueError, match=f"after= names jobs that are not known.*{first}"):
        await jobs.node.options(after=[first]).enqueue("d1", 0.05)
    assert not await r.zcard(keys.waiting("default"))
    assert not await r.zcard(keys.arming("default"))

    worker = relays()
    await _ready(r, namespace, worker)

    async def relayed(jid: str) -> bool:
        return (await jobs.app.status(jid)).state != "unknown"

    await wait_until(lambda: relayed(first), timeout=30, every=0.02)
    assert await jobs.node.options(after=[first]).enqueue("d1", 0.05) is not None

    async def started() -> bool:
        assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        return ["S", "p1"] in [event[:2] for event in await _events(r, namespace)]

    await wait_until(started, timeout=30, every=0.02)
    await _kill(worker)  # inside the parent's run
    held = Counter(await _in_flight(r, namespace))
    (second,) = await _outbox(jobs, jobs.node.s("p2", 0.2))  # waits: no relay runs
    # p2's row waits (and p1's too, when the kill fell between its push and the commit
    # of its delete: the next relay's push of it is refused, the row deleted).
    assert second in await _jids(jobs)
    worker = relays()
    await _ready(r, namespace, worker)
    up = anyio.current_time()
    await wait_until(lambda: relayed(second), timeout=BOUND, every=0.02)
    assert await jobs.node.options(after=[second]).enqueue("d2", 0.05) is not None

    left: list[str] = []

    async def ended() -> bool:
        assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        left[:] = await _unfinished(r, jobs, [])
        runs = await _runs(r, namespace, held)
        left.extend(f"{tag} not finished" for tag in ("p1", "d1", "p2", "d2")
                    if tag not in runs.last_finish)
        return not left

    took = await _wait_ended(ended, left, up)
    runs = await _runs(r, namespace, held)
    for parent, dependent in (("p1", "d1"), ("p2", "d2")):
        assert runs.once(parent), (parent, runs.starts, held)
        assert runs.once(dependent), (dependent, runs.starts, held)
        assert runs.first_start[dependent] > runs.last_finish[parent], "started early"
    print(f"CHAOS outbox-dependents held={dict(held)} bound={BOUND:.1f} "
          f"ended_after_ready={took:.1f}")
