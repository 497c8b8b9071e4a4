"""The job app of the process-death chaos tests, run by the real CLI:

    cogworker-async run tests.worker.chaos.processes.chaosapp:jobs    (cwd: the repository root)

Configured like tests/worker/e2e/jobsapp.py, from the environment ``tests/workerproc.py`` sets
(``E2E_REDIS_URL``, ``E2E_NAMESPACE``, ``E2E_SETTINGS``); the test process builds the
same App with ``build(url, namespace)`` to enqueue.

Every job records its start and its finish, before and after its work, as ``"<tag>
<pid>"`` entries of two Redis lists (``started_key`` and ``finished_key``), awaited
before the job goes on: a run killed at any point has left exactly what it got to, so a
test counts runs (and who ran them) exactly.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import redis.asyncio

from cogworker_async import App, current_job
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.redis.liveness import as_bytes
from tests.clients import async_client
from tests.worker.e2e.jobsapp import NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

# Fast but realistic on a loaded 2-core machine: a beat every 0.3 s, dead after 2 s
# without one (a starting Python process takes ~1 s of CPU), recovery every 0.5 s.
SETTINGS: Final[dict[str, Any]] = {
    "poll_interval": 0.1,
    "retry_base_delay": 0.0,
    "shutdown_timeout": 2.0,
    "idle_fetch_interval": 0.2,
    "heartbeat_interval": 0.3,
    "orphan_threshold": 2.0,
    "recovery_interval": 0.5,
    "max_orphanings": 3,
}

TARGET: Final = "tests.worker.chaos.processes.chaosapp:jobs"


def started_key(namespace: str) -> str:
    return f"{namespace}:chaos:started"


def finished_key(namespace: str) -> str:
    return f"{namespace}:chaos:finished"


async def runs(r: redis.asyncio.Redis, key: str) -> list[tuple[str, int]]:
    """(tag, pid) of each entry of a record list, in order."""
    found = []
    for entry in await r.lrange(key, 0, -1):
        tag, pid = as_bytes(entry).decode().split(" ")
        found.append((tag, int(pid)))
    return found


async def counts(r: redis.asyncio.Redis, key: str) -> Counter[str]:
    """tag -> how many entries the record list has for it."""
    return Counter(tag for tag, _ in await runs(r, key))


class _Recorder:
    def __init__(self) -> None:
        self.url = ""
        self.namespace = ""
        self._client: redis.asyncio.Redis | None = None

    def client(self) -> redis.asyncio.Redis:
        if self._client is None:  # in the worker's (only) event loop, on first use
            self._client = async_client(self.url)  # one server or a cluster
        return self._client

    async def started(self, tag: str) -> None:
        await self.client().rpush(started_key(self.namespace), f"{tag} {os.getpid()}")

    async def finished(self, tag: str) -> None:
        await self.client().rpush(finished_key(self.namespace), f"{tag} {os.getpid()}")


recorder = _Recorder()


async def work(tag: str, seconds: float) -> None:
    """A well-behaved job: sleeps (without blocking the loop) between its records."""
    await recorder.started(tag)
    await anyio.sleep(seconds)
    await recorder.finished(tag)


async def poison(tag: str) -> None:
    """Kills its own process (as the OOM killer would), every time it runs."""
    await recorder.started(tag)
    os.kill(os.getpid(), signal.SIGKILL)
    await anyio.sleep(60)  # not reached


async def blocker(tag: str, seconds: float) -> None:
    """Blocks the event loop: a C call or CPU work inside an ``async def``."""
    await recorder.started(tag)
    time.sleep(seconds)  # blocks the loop: the point of the job
    await recorder.finished(tag)


async def fail(tag: str, delay: float) -> None:
    """Raises after ``delay`` seconds (registered with ``retry=False``)."""
    await recorder.started(tag)
    await anyio.sleep(delay)
    await recorder.finished(tag)
    raise RuntimeError(f"boom {tag}")


async def callback(kind: str) -> None:
    """A batch's callback: records ``<kind>:<bid>`` (tests/.../test_batch_storm.py)."""
    tag = f"{kind}:{current_job().batch_id}"
    await recorder.started(tag)
    await recorder.finished(tag)


def events_key(namespace: str) -> str:
    return f"{namespace}:chaos:events"


async def node(tag: str, seconds: float) -> None:
    """A job of a dependency tree: records "S <tag>" and "F <tag>" in one list, so that
    a test reads the order of every start and finish across processes (one Redis)."""
    await recorder.started(tag)
    await recorder.client().rpush(events_key(recorder.namespace), f"S {tag}")
    await anyio.sleep(seconds)
    await recorder.client().rpush(events_key(recorder.namespace), f"F {tag}")
    await recorder.finished(tag)


async def chained(value: int, tag: str) -> int:
    """A step of a chain with pass_result: records the value it was handed, returns the
    next one."""
    await recorder.started(f"{tag}={value}")
    await recorder.client().rpush(events_key(recorder.namespace), f"S {tag}")
    await anyio.sleep(0.05)
    await recorder.client().rpush(events_key(recorder.namespace), f"F {tag}")
    await recorder.finished(f"{tag}={value}")
    return value + 1


def inside_key(namespace: str) -> str:
    """"<tag> <pid>" of each run of ``nest`` inside its child batch's block."""
    return f"{namespace}:chaos:inside"


def _nest(app: App, work_job: JobFunction[[str, float], Awaitable[None]],
          callback_job: JobFunction[[str], Awaitable[None]]
          ) -> Callable[[str, int, float], Awaitable[None]]:
    async def nest(tag: str, members: int, hold: float) -> None:
        """A batch member that opens a child batch (its parent: this job's batch),
        records that it is inside the block (``inside_key``: a test kills it there),
        holds it ``hold`` s, then adds ``members`` jobs and exits the block."""
        await recorder.started(tag)
        async with app.batch(f"child of {tag}", on_complete=callback_job.s("child")):
            await recorder.client().rpush(inside_key(recorder.namespace),
                                          f"{tag} {os.getpid()}")
            await anyio.sleep(hold)
            for m in range(members):
                await work_job.enqueue(f"{tag}k{m}", 0.05)
        await recorder.finished(tag)

    return nest


HOLD_OPEN_LEASE: Final = 2.0
"""Seconds ``hold_open``'s block holds its batch without an add (``jobs.batch(hold=)``):
killed inside it, the batch is let go of once this lease lapses."""


async def hold_open(url: str, namespace: str, members: int) -> None:
    """An enqueuer (not a worker): opens a batch on a ``HOLD_OPEN_LEASE`` lease, enqueues
    ``members`` jobs in it, says so ("<bid> <pid>" at ``inside_key``) and hangs inside
    the block: a test SIGKILLs it there (``python -c``, tests/.../test_liveness_storm.py)."""
    jobs = build(url, namespace)
    client = async_client(url)
    async with jobs.app.batch("held by an enqueuer", hold=HOLD_OPEN_LEASE,
                              on_complete=jobs.callback.s("complete")) as batch:
        for m in range(members):
            await jobs.work.enqueue(f"e{m}", 0.05)
        await client.rpush(inside_key(namespace), f"{batch.bid} {os.getpid()}")
        await anyio.sleep(3600)  # killed here


@dataclass(frozen=True)
class Jobs:
    app: App
    work: JobFunction[[str, float], Awaitable[None]]
    poison: JobFunction[[str], Awaitable[None]]
    blocker: JobFunction[[str, float], Awaitable[None]]
    fail: JobFunction[[str, float], Awaitable[None]]
    callback: JobFunction[[str], Awaitable[None]]
    node: JobFunction[[str, float], Awaitable[None]]
    chained: JobFunction[[int, str], Awaitable[int]]
    nest: JobFunction[[str, int, float], Awaitable[None]]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    app = App(redis_url, namespace=namespace, **{**SETTINGS, **overrides})
    work_job: JobFunction[[str, float], Awaitable[None]] = app.job(name="work")(work)
    callback_job: JobFunction[[str], Awaitable[None]] = app.job(name="callback")(callback)
    return Jobs(
        app,
        work=work_job,
        poison=app.job(name="poison")(poison),
        blocker=app.job(name="blocker", queue="blocking")(blocker),
        fail=app.job(name="fail", retry=False)(fail),
        callback=callback_job,
        node=app.job(name="node")(node),
        chained=app.job(name="chained", keep_result=3600)(chained),
        nest=app.job(name="nest")(_nest(app, work_job, callback_job)),
    )


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    namespace = os.environ[NAMESPACE_ENV]
    recorder.url, recorder.namespace = url, namespace
    return build(url, namespace, **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()
