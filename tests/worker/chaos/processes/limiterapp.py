"""The job app of the limiter chaos test, run by the real CLI:

    cogworker-async run tests.worker.chaos.processes.limiterapp:jobs   (cwd: the repository root)

Configured like ``chaosapp`` (same environment, same fast settings), with one
concurrent limiter (``LIMITER``, ``LIMIT`` slots). Its jobs record each run's start and
end *inside* the limiter as ``"<start|end> <tag> <pid> <epoch s> <reschedules>"``
entries of one Redis list (awaited before the job goes on: a run killed at any point
has left exactly what it got to), so the test can tell how many were inside at once
across every process (``queuelimitapp.most_at_once`` reads the same shape).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import redis.asyncio

from cogworker_async import App, current_job
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.redis.liveness import as_bytes
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.queuelimitapp import Run
from tests.worker.e2e.jobsapp import NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

TARGET: Final = "tests.worker.chaos.processes.limiterapp:jobs"
QUEUE: Final = "limits"
LIMITER: Final = "slots"
LIMIT: Final = 3
HELD_AT_MOST: Final = 60.0
"""Seconds a ``held_until`` job holds its slot if the test never releases it."""

recorder = chaosapp.recorder


def runs_key(namespace: str) -> str:
    return f"{namespace}:limiter:runs"


def release_key(namespace: str) -> str:
    """Set by the test: every ``held_until`` job leaves its slot."""
    return f"{namespace}:limiter:release"


async def _record(what: str, tag: str) -> None:
    limited = int(current_job().payload.get("limited_count") or 0)
    await recorder.client().rpush(runs_key(recorder.namespace),
                                  f"{what} {tag} {os.getpid()} {time.time():.6f} {limited}")


@dataclass(frozen=True)
class Jobs:
    app: App
    held: JobFunction[[str, float], Awaitable[None]]
    held_until: JobFunction[[str], Awaitable[None]]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    app = App(redis_url, namespace=namespace, **{**chaosapp.SETTINGS, **overrides})
    slots = app.limiter(LIMITER, concurrent=LIMIT)

    async def held(tag: str, seconds: float) -> None:
        """Holds a slot for ``seconds``."""
        async with slots:
            await _record("start", tag)
            await anyio.sleep(seconds)
            await _record("end", tag)

    async def held_until(tag: str) -> None:
        """Holds a slot until the test sets ``release_key``."""
        async with slots:
            await _record("start", tag)
            client, key = recorder.client(), release_key(recorder.namespace)
            with anyio.move_on_after(HELD_AT_MOST):
                while not await client.exists(key):
                    await anyio.sleep(0.05)
            await _record("end", tag)

    return Jobs(app, held=app.job(name="held", queue=QUEUE)(held),
                held_until=app.job(name="held_until", queue=QUEUE)(held_until))


async def read_runs(r: redis.asyncio.Redis,
                    namespace: str) -> tuple[list[Run], list[int]]:
    """Every run (its start paired with its end, by tag and pid), and the reschedules
    each run had before it got in."""
    open_runs: dict[tuple[str, int], float] = {}
    done: list[Run] = []
    reschedules: list[int] = []
    for entry in await r.lrange(runs_key(namespace), 0, -1):
        what, tag, pid, at, limited = as_bytes(entry).decode().split(" ")
        if what == "start":
            reschedules.append(int(limited))
            open_runs[(tag, int(pid))] = float(at)
        else:
            done.append(Run(tag, int(pid), open_runs.pop((tag, int(pid))), float(at)))
    return done + [Run(tag, pid, start, None) for (tag, pid), start in open_runs.items()], \
        reschedules


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    namespace = os.environ[NAMESPACE_ENV]
    recorder.url, recorder.namespace = url, namespace
    return build(url, namespace, **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()
