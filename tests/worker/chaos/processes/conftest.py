"""Process-death chaos harness: real worker processes (the CLI) killed, paused and
stopped, each test against its own private redis-server.

Scale: ``COGWORKER_CHAOS=full`` runs the full sizes (and marks the tests ``chaos``, so
``make chaos`` picks them up and ``make test`` leaves them out); anything else runs the
short versions, part of the default suite.

Every worker process a test starts is SIGKILLed by pid at teardown (whatever state it is
in, SIGSTOP included); if the test failed, the tail of each worker's log is printed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Final, cast

import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.workerproc import WorkerProcess

FULL: Final = os.environ.get("COGWORKER_CHAOS", "").strip().lower() == "full"
SCALE: Final = "full" if FULL else "short"

READY_TIMEOUT: Final = 20.0
"""Seconds a set of workers may take to start together (imports on a busy 2-core box)."""
EXIT_SLACK: Final = 3.0
"""Seconds a stopping worker may take beyond its shutdown_timeout."""
LOG_TAIL: Final = 60


def marks(*, short_timeout: float, full_timeout: float) -> list[pytest.MarkDecorator]:
    """A scenario module's ``pytestmark``: slow, a time limit, and ``chaos`` when full."""
    found = [pytest.mark.slow, pytest.mark.timeout(full_timeout if FULL else short_timeout)]
    if FULL:
        found.append(pytest.mark.chaos)
    return found


def report(scenario: str, **figures: Any) -> None:
    """The scenario's figures, one JSON line (seen with ``pytest -s`` or on failure)."""
    print(f"CHAOS {scenario} [{SCALE}] {json.dumps(figures, sort_keys=True)}")


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    if rep.when == "call":
        item.stash[_FAILED] = rep.failed
    return rep


class Fleet:
    """The worker processes of one test (the real CLI, the chaos job app)."""

    def __init__(self, url: str, namespace: str) -> None:
        self.url = url
        self.namespace = namespace
        self.started: list[WorkerProcess] = []

    def start(self, *args: str, **settings: Any) -> WorkerProcess:
        """A new worker process (``args``: CLI options; ``settings``: App overrides)."""
        worker = WorkerProcess(self.url, self.namespace, settings,
                               ["--log-level", "WARNING", *args], target=chaosapp.TARGET)
        self.started.append(worker)
        return worker.start()

    def kill_all(self) -> None:
        for worker in self.started:
            if worker.process is not None:
                worker.kill()

    def dump(self) -> None:
        for worker in self.started:
            if worker.process is None:
                continue
            tail = "\n".join(worker.log().splitlines()[-LOG_TAIL:])
            print(f"--- worker {worker.pid} (exit {worker.returncode}) ---\n{tail}")

    def cleanup(self) -> None:
        for worker in self.started:
            worker.cleanup()


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    """This test's own redis-server (stopped by pid at teardown)."""
    process = ServerProcess().start()
    try:
        yield process
    finally:
        process.cleanup()


@pytest.fixture
async def r(server: ServerProcess) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(server.url)
    yield client
    await client.aclose()


@pytest.fixture
async def jobs(server: ServerProcess, namespace: str) -> AsyncIterator[chaosapp.Jobs]:
    built = chaosapp.build(server.url, namespace)
    yield built
    await built.app.close()


@pytest.fixture(params=["single", "cluster"])
def topology_url(request: pytest.FixtureRequest, server: ServerProcess) -> str:
    """A scenario on both: this test's own server, or the session's 3-master cluster."""
    if request.param == "cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    return server.url


@pytest.fixture
def fleet(request: pytest.FixtureRequest, server: ServerProcess,
          namespace: str) -> Iterator[Fleet]:
    workers = Fleet(server.url, namespace)
    try:
        yield workers
    finally:
        workers.kill_all()
        if request.node.stash.get(_FAILED, True):
            workers.dump()
        workers.cleanup()


# -- reading Redis ----------------------------------------------------------------------


async def beats(r: redis.asyncio.Redis, namespace: str) -> dict[str, dict[str, Any]]:
    """identity -> its last beat's info (pid, busy, lag_ms, ...)."""
    found = {}
    for identity, raw in (await r.hgetall(Keys(namespace).beats)).items():
        found[as_bytes(identity).decode()] = json.loads(raw)
    return found


async def identity_of(r: redis.asyncio.Redis, namespace: str, worker: WorkerProcess,
                      timeout: float = READY_TIMEOUT) -> str:
    """The identity of a worker process, found by its pid in the beats hash."""
    found: list[str] = []

    async def beaten() -> bool:
        assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        found[:] = [identity for identity, info in (await beats(r, namespace)).items()
                    if info.get("pid") == worker.pid]
        return bool(found)

    await wait_until(beaten, timeout=timeout, every=0.05)
    return found[0]


async def wait_ready(r: redis.asyncio.Redis, namespace: str,
                     workers: list[WorkerProcess]) -> None:
    """Until every worker listens for wake-ups (its Manager runs and can fetch)."""

    async def listening() -> bool:
        for worker in workers:
            assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        ((_, count),) = await r.pubsub_numsub(Keys(namespace).wake_channel)
        return int(count) >= len(workers)

    await wait_until(listening, timeout=READY_TIMEOUT, every=0.05)


async def in_progress_lists(r: redis.asyncio.Redis,
                            namespace: str) -> dict[tuple[str, str], list[bytes]]:
    """(queue, identity) -> its in-progress list, for every such list in the namespace
    (a process has one per queue it fetched from)."""
    keys = Keys(namespace)
    found = {}
    async for key in r.scan_iter(match=keys.in_progress_pattern):
        found[keys.identity_of_list(key.decode())] = [
            as_bytes(raw) for raw in await r.lrange(key, 0, -1)]
    return found


async def zset_entries(r: redis.asyncio.Redis, key: str) -> list[dict[str, Any]]:
    return [json.loads(member) for member in cast("list[bytes]", await r.zrange(key, 0, -1))]


async def recoveries(r: redis.asyncio.Redis, namespace: str) -> list[dict[str, Any]]:
    """Recovery events, newest first."""
    return [json.loads(raw) for raw in await r.lrange(Keys(namespace).recoveries, 0, -1)]


def tags_of(raws: Sequence[bytes | str]) -> list[str]:
    """The tag (first argument) of each raw job."""
    return [str(json.loads(raw)["args"][0]) for raw in raws]


class Clock:
    """Seconds since the scenario began."""

    def __init__(self) -> None:
        self.began = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.began
