"""Harness of the Redis-fault chaos tests (docs/design.md, "Fault injection").

Each test starts its own private redis-server (``servers(...)``): it restarts it, puts
a fault proxy in front of it, or plants bad keys in it. Jobs record their runs on a
separate *witness* server shared by the package (never faulted; see faultapp.py).
Worker processes run the real CLI (tests/workerproc.py) and are killed by pid at
teardown, their logs printed.

Sizes: the default run is short; ``COGWORKER_CHAOS=full`` runs the bigger versions.
Every test prints its figures as one line: ``CHAOS <scenario> {json}``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final, cast

import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.worker.chaos.redisfaults import faultapp
from tests.workerproc import WorkerProcess, worker_pool

FULL: Final = os.environ.get("COGWORKER_CHAOS", "").strip().lower() == "full"
TARGET: Final = "tests.worker.chaos.redisfaults.faultapp:jobs"
READY_TIMEOUT: Final = 20.0
"""Seconds a worker may take to start (imports on a busy 2-core machine)."""

# Fast, but not so fast that a busy 2-core machine makes a live worker look dead.
SETTINGS: Final[dict[str, Any]] = {
    "heartbeat_interval": 0.3,
    "orphan_threshold": 2.0,
    "recovery_interval": 0.3,
    "idle_fetch_interval": 0.2,
    "poll_interval": 0.1,
    "retry_base_delay": 0.0,
    "shutdown_timeout": 3.0,
}


def size(short: int, full: int) -> int:
    return full if FULL else short


def report(scenario: str, **figures: Any) -> None:
    print(f"CHAOS {scenario} {json.dumps(figures, sort_keys=True, default=str)}")


@pytest.fixture(scope="package")
def witness_server() -> Iterator[ServerProcess]:
    server = ServerProcess().start()
    yield server
    server.cleanup()


class Witness:
    """What the jobs recorded (see faultapp.py), read from the witness server."""

    def __init__(self, client: redis.asyncio.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    async def events(self, key: str) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in await self.client.lrange(key, 0, -1)]

    async def started(self) -> list[dict[str, Any]]:
        return await self.events(faultapp.started_key(self.namespace))

    async def ran(self) -> list[dict[str, Any]]:
        return await self.events(faultapp.ran_key(self.namespace))

    async def starts(self) -> Counter[str]:
        return Counter(event["tag"] for event in await self.started())

    async def runs(self) -> Counter[str]:
        return Counter(event["tag"] for event in await self.ran())

    async def finished(self) -> int:
        """How many distinct tags finished at least once."""
        return int(await self.client.scard(faultapp.ran_tags_key(self.namespace)))

    async def finished_count(self) -> int:
        """How many finishes were recorded (all runs)."""
        return int(await self.client.llen(faultapp.ran_key(self.namespace)))

    async def last_ran(self, pid: int) -> float:
        raw = await self.client.hget(faultapp.last_ran_key(self.namespace), str(pid))
        return float(raw) if raw else 0.0

    async def open_gate(self) -> None:
        await self.client.set(faultapp.gate_key(self.namespace), "1")


@pytest.fixture
async def witness(witness_server: ServerProcess, namespace: str) -> AsyncIterator[Witness]:
    client = redis.asyncio.Redis.from_url(witness_server.url)
    yield Witness(client, namespace)
    await client.aclose()


@pytest.fixture
def servers() -> Iterator[Callable[..., ServerProcess]]:
    """``servers(appendonly=..., extra=[...])``: this test's own private server(s)."""
    started: list[ServerProcess] = []

    def start(**options: Any) -> ServerProcess:
        server = ServerProcess(**options)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()
        server.cleanup()


StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def start_worker(witness_server: ServerProcess, namespace: str) -> Iterator[StartWorker]:
    """``start_worker(url, *cli_args, **settings)``: a running worker process on ``url``
    (SETTINGS overridden by ``settings``), recording its runs on the witness."""
    with worker_pool() as workers:
        def start(url: str, *args: str, **settings: Any) -> WorkerProcess:
            worker = WorkerProcess(url, namespace, {**SETTINGS, **settings}, list(args),
                                   target=TARGET,
                                   env={faultapp.WITNESS_ENV: witness_server.url})
            workers.append(worker)
            return worker.start()
        yield start


@pytest.fixture
async def make_jobs(namespace: str) -> AsyncIterator[Callable[[str], faultapp.Jobs]]:
    """``make_jobs(url)``: the job app on ``url`` (direct, never through a proxy), to
    enqueue from the test."""
    built: list[faultapp.Jobs] = []

    def make(url: str) -> faultapp.Jobs:
        jobs = faultapp.build(url, namespace)
        built.append(jobs)
        return jobs

    yield make
    for jobs in built:
        await jobs.app.close()


@pytest.fixture
async def clients() -> AsyncIterator[Callable[[str], redis.asyncio.Redis]]:
    """``clients(url)``: a plain client (raw bytes), closed at teardown."""
    made: list[redis.asyncio.Redis] = []

    def make(url: str) -> redis.asyncio.Redis:
        client = redis.asyncio.Redis.from_url(url)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()


# -- waiting and reading --------------------------------------------------------------


async def wait_alive(worker: WorkerProcess, condition: Callable[[], Any], *,
                     timeout: float) -> None:
    """``wait_until(condition)``, failing at once (with its log) if the worker exits."""

    async def check() -> bool:
        assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        result = condition()
        if not isinstance(result, bool):
            result = await result
        return bool(result)

    await wait_until(check, timeout=timeout, every=0.02)


async def wait_ready(r: redis.asyncio.Redis, namespace: str, *workers: WorkerProcess) -> None:
    """Until every worker listens for wake-ups (its Manager runs and can fetch)."""

    async def listening() -> bool:
        ((_, count),) = await r.pubsub_numsub(Keys(namespace).wake_channel)
        return int(count) >= len(workers)

    for worker in workers:
        await wait_alive(worker, listening, timeout=READY_TIMEOUT)


async def in_progress(r: redis.asyncio.Redis, namespace: str) -> dict[str, list[bytes]]:
    """Every non-empty in-progress list of the namespace, of every queue (lists only)."""
    found: dict[str, list[bytes]] = {}
    async for key in r.scan_iter(match=Keys(namespace).in_progress_pattern, _type="list"):
        entries = cast("list[bytes]", await r.lrange(key, 0, -1))
        if entries:
            found[as_bytes(key).decode()] = entries
    return found


async def leftovers(r: redis.asyncio.Redis, namespace: str,
                    queues: tuple[str, ...] = ("default",)) -> dict[str, int]:
    """Where jobs could still be: every count is 0 once everything is settled. Each
    queue has its own sets and lists of jobs waiting to be filed: each is counted."""
    keys = Keys(namespace)
    counts = {}
    for q in queues:
        counts[f"queue:{q}"] = int(await r.llen(keys.queue(q)))
        counts[f"unsettled:{q}"] = int(await r.llen(keys.unsettled(q)))
        counts[f"repeat_orphans:{q}"] = int(await r.llen(keys.repeat_orphans(q)))
        for name in ("retry", "schedule", "dead"):
            counts[f"{name}:{q}"] = int(await r.zcard(getattr(keys, name)(q)))
    counts["in_progress"] = sum(len(v) for v in (await in_progress(r, namespace)).values())
    return counts


async def forgotten(r: redis.asyncio.Redis, namespace: str, identity: str,
                    queues: tuple[str, ...] = ("default",)) -> bool:
    """Recovery took everything of ``identity`` and removed it from the registries: each
    queue's (where it had a list) and the namespace's."""
    keys = Keys(namespace)
    for queue in queues:
        if (await r.sismember(keys.queue_identities(queue), identity)
                or await r.exists(keys.in_progress(queue, identity))):
            return False
    return not await r.sismember(keys.processes, identity)


def log_count(worker: WorkerProcess, text: str) -> int:
    return worker.log().count(text)
