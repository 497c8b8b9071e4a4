"""``cogworker-async run --processes N``: real supervisors and real worker processes
(the CLI), killed and signalled by pid, against the session's Redis (each test its own
namespace).

- N children beat, each its own identity, each naming its supervisor; SIGTERM to the
  supervisor stops them all gracefully and it exits 0.
- A SIGKILLed child is replaced, and a flow of jobs through the kill loses nothing.
- A SIGKILLed supervisor takes its children with it (PDEATHSIG): no orphans.
- ``--max-jobs`` and ``--max-memory`` recycle children; ``--burst`` ends when the work
  is done; a child that cannot start stops the supervisor with exit 2.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import redis.asyncio

from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.conftest import FULL, beats, report
from tests.workerproc import WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600 if FULL else 120)]

SETTINGS: Final = chaosapp.SETTINGS
START: Final = 30.0
"""Seconds for a set of workers to start (imports on a busy 2-core machine)."""
BOUND: Final = SETTINGS["orphan_threshold"] + SETTINGS["recovery_interval"] + 2.0


def children_of(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux /proc)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not reaped) is not alive either.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


class Supervised(WorkerProcess):
    """A ``run --processes`` supervisor; its children are killed by pid at teardown."""

    seen: set[int]

    def children(self) -> list[int]:
        found = children_of(self.pid) if self.process is not None else []
        self.seen.update(found)
        return found

    def cleanup(self) -> None:
        for child in [*getattr(self, "seen", set()), *children_of(self.pid)]:
            if alive(child):
                os.kill(child, signal.SIGKILL)
        super().cleanup()


@pytest.fixture
def supervise(redis_url: str, namespace: str) -> Iterator[Any]:
    started: list[Supervised] = []

    def start(*args: str, **settings: Any) -> Supervised:
        sup = Supervised(redis_url, namespace, {**SETTINGS, **settings},
                         ["--log-level", "INFO", *args], target=chaosapp.TARGET)
        sup.seen = set()
        started.append(sup)
        return sup.start()  # type: ignore[return-value]

    yield start
    for sup in started:
        if sup.process is not None and sup.returncode is None:
            print(sup.log()[-4000:])
        sup.cleanup()


@pytest.fixture
async def r(redis_url: str) -> Any:
    client = redis.asyncio.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def jobs(redis_url: str, namespace: str) -> Any:
    built = chaosapp.build(redis_url, namespace)
    yield built
    await built.app.close()


async def _beating(r: redis.asyncio.Redis, namespace: str, pids: set[int]) -> dict[int, Any]:
    """pid -> beat info of the live processes among ``pids`` that have beaten."""
    return {info["pid"]: info for info in (await beats(r, namespace)).values()
            if info.get("pid") in pids}


async def test_n_children_beat_under_their_supervisor_and_stop_with_it(
    supervise: Any, r: redis.asyncio.Redis, namespace: str,
) -> None:
    sup = supervise("--processes", "2")

    async def two_beat() -> bool:
        return len(await _beating(r, namespace, set(sup.children()))) == 2
    await wait_until(two_beat, timeout=START, every=0.1)
    infos = await _beating(r, namespace, set(sup.children()))
    assert {info["supervisor"] for info in infos.values()} == \
        {f"{socket.gethostname()}:{sup.pid}"}
    children = sup.children()

    sup.signal(signal.SIGTERM)
    assert await sup.wait_exit(30) == 0
    assert not any(alive(child) for child in children)
    assert "all worker processes have exited (exit 0)" in sup.log()


async def test_killed_children_are_replaced_and_their_jobs_are_not_lost(
    supervise: Any, r: redis.asyncio.Redis, namespace: str, jobs: Any,
) -> None:
    """Children SIGKILLed under a flow of jobs (``make chaos``: 10,000 jobs, 5 kills)."""
    size, kills = (10_000, 5) if FULL else (300, 1)
    sup = supervise("--processes", "2")
    await wait_until(lambda: len(sup.children()) == 2, timeout=START, every=0.1)
    tags = [f"j{i}" for i in range(size)]
    for start in range(0, size, 1000):
        await jobs.work.enqueue_many([((tag, 0.01), {}) for tag in tags[start:start + 1000]])
    victims: list[int] = []
    for kill in range(kills):
        async def running(kill: int = kill) -> bool:
            started = len(await chaosapp.runs(r, chaosapp.started_key(namespace)))
            return started >= (kill + 1) * size // (kills + 2) and len(sup.children()) == 2
        await wait_until(running, timeout=START + BOUND, every=0.05)
        victim = sup.children()[kill % 2]
        os.kill(victim, signal.SIGKILL)
        victims.append(victim)

        async def replaced(victim: int = victim) -> bool:
            now = set(sup.children())
            return len(now) == 2 and victim not in now
        await wait_until(replaced, timeout=BOUND + 30, every=0.1)

    async def all_done() -> bool:
        finished = await chaosapp.counts(r, chaosapp.finished_key(namespace))
        return all(finished[tag] >= 1 for tag in tags)
    await wait_until(all_done, timeout=BOUND + 120 + size / 100, every=0.5)
    started = await chaosapp.counts(r, chaosapp.started_key(namespace))
    report("supervisor-kills", jobs=size, kills=kills,
           ran_twice=sum(1 for tag in tags if started[tag] > 1), lost=0)
    for victim in victims:
        assert f"worker process {victim} (slot" in sup.log()
    assert sup.log().count("died (killed by SIGKILL)") == kills
    sup.signal(signal.SIGTERM)
    assert await sup.wait_exit(30) == 0, sup.log()[-3000:]


async def test_a_killed_supervisor_takes_its_children_with_it(
    supervise: Any, r: redis.asyncio.Redis, namespace: str,
) -> None:
    sup = supervise("--processes", "2")

    async def two_beat() -> bool:
        return len(await _beating(r, namespace, set(sup.children()))) == 2
    await wait_until(two_beat, timeout=START, every=0.1)
    children = sup.children()
    sup.signal(signal.SIGKILL)
    await wait_until(lambda: not any(alive(child) for child in children), timeout=30,
                     every=0.1)


async def test_max_jobs_recycles_a_child_and_the_work_goes_on(
    supervise: Any, r: redis.asyncio.Redis, namespace: str, jobs: Any,
) -> None:
    sup = supervise("--processes", "1", "--max-jobs", "5")
    await wait_until(lambda: len(sup.children()) == 1, timeout=START, every=0.1)
    tags = [f"m{i}" for i in range(12)]
    await jobs.work.enqueue_many([((tag, 0.0), {}) for tag in tags])

    async def all_done() -> bool:
        finished = await chaosapp.counts(r, chaosapp.finished_key(namespace))
        return all(finished[tag] >= 1 for tag in tags)
    await wait_until(all_done, timeout=60, every=0.2)
    pids = {pid for _, pid in await chaosapp.runs(r, chaosapp.finished_key(namespace))}
    assert len(pids) >= 3, pids  # 12 jobs, at most 5 a process
    assert "--max-jobs reached" in sup.log()
    sup.signal(signal.SIGTERM)
    assert await sup.wait_exit(30) == 0


async def test_max_memory_restarts_a_child_gracefully(supervise: Any) -> None:
    sup = supervise("--processes", "1", "--max-memory", "1M")  # any Python is bigger
    await wait_until(lambda: "over --max-memory" in sup.log(), timeout=START, every=0.1)
    first = set(sup.seen)

    async def replaced() -> bool:
        return bool(set(sup.children()) - first)
    await wait_until(replaced, timeout=START, every=0.1)
    assert "died" not in sup.log()  # stopped gracefully, not crashed
    sup.signal(signal.SIGTERM)
    assert await sup.wait_exit(30) == 0


async def test_burst_ends_when_the_work_is_done(
    supervise: Any, r: redis.asyncio.Redis, namespace: str, jobs: Any,
) -> None:
    tags = [f"b{i}" for i in range(40)]
    await jobs.work.enqueue_many([((tag, 0.01), {}) for tag in tags])
    await jobs.work.enqueue_in(0.5, "due-soon", 0.0)
    sup = supervise("--processes", "2", "--burst")
    assert await sup.wait_exit(60) == 0
    finished = await chaosapp.counts(r, chaosapp.finished_key(namespace))
    assert all(finished[tag] == 1 for tag in [*tags, "due-soon"]), finished
    assert "burst: nothing left to do" in sup.log()


async def test_bad_settings_are_refused_before_any_child_starts(supervise: Any) -> None:
    sup = supervise("--processes", "2", "--queue", "no spaces allowed")
    assert await sup.wait_exit(START) == 2
    assert "invalid queue name" in sup.log()
    assert "started (slot" not in sup.log()


async def test_a_child_that_cannot_start_stops_the_supervisor(
    redis_url: str, namespace: str,
) -> None:
    sup = Supervised(redis_url, namespace, {}, ["--processes", "2"],
                     target="tests.cli.supervisor.childfails:jobs")
    sup.seen = set()
    sup.start()
    try:
        assert await sup.wait_exit(START) == 2
        assert "could not start (exit 2): stopping" in sup.log()
        assert sup.log().count("started (slot") <= 2  # never started again
    finally:
        sup.cleanup()


async def test_reload_restarts_the_worker_when_code_changes(
    supervise: Any, tmp_path: Path,
) -> None:
    pytest.importorskip("watchfiles")
    sup = supervise("--reload")
    await wait_until(lambda: len(sup.children()) == 1, timeout=START, every=0.1)
    first = set(sup.children())
    # The supervisor watches its current directory: the repository root (workerproc).
    touched = Path(__file__).with_name("_reload_probe.py")
    try:
        async def changed() -> bool:
            touched.write_text(f"# {os.urandom(4).hex()}\n")  # one more change per look
            return "--reload:" in sup.log()
        await wait_until(changed, timeout=START, every=0.5)

        async def replaced() -> bool:
            return bool(set(sup.children()) - first)
        await wait_until(replaced, timeout=START, every=0.1)
    finally:
        touched.unlink(missing_ok=True)
    sup.signal(signal.SIGTERM)
    assert await sup.wait_exit(30) == 0
