"""The job app of the queue-limit chaos test, run by the real CLI:

    cogworker-async run tests.worker.chaos.processes.queuelimitapp:jobs   (cwd: the repository root)

Configured like ``chaosapp`` (same environment, same fast settings), with
``queue_limits`` from the test's settings. ``limited`` records each run's start and end
as ``"<start|end> <tag> <pid> <epoch s>"`` entries of one Redis list (awaited before the
job goes on: a run killed at any point has left exactly what it got to), so the test can
tell how many runs were inside at once across every process.
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

from cogworker_async import App
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.redis.liveness import as_bytes
from tests.worker.chaos.processes import chaosapp
from tests.worker.e2e.jobsapp import NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

TARGET: Final = "tests.worker.chaos.processes.queuelimitapp:jobs"
QUEUE: Final = "reports"

recorder = chaosapp.recorder


def runs_key(namespace: str) -> str:
    return f"{namespace}:queuelimit:runs"


async def limited(tag: str, seconds: float) -> None:
    client = recorder.client()
    key = runs_key(recorder.namespace)
    await client.rpush(key, f"start {tag} {os.getpid()} {time.time():.6f}")
    await anyio.sleep(seconds)
    await client.rpush(key, f"end {tag} {os.getpid()} {time.time():.6f}")


@dataclass(frozen=True)
class Run:
    tag: str
    pid: int
    start: float
    end: float | None
    """None: it never finished (its process was killed while it ran)."""


async def read_runs(r: redis.asyncio.Redis, namespace: str) -> list[Run]:
    """Every run, its start paired with its end (by tag and pid)."""
    open_runs: dict[tuple[str, int], float] = {}
    done: list[Run] = []
    for entry in await r.lrange(runs_key(namespace), 0, -1):
        what, tag, pid, at = as_bytes(entry).decode().split(" ")
        if what == "start":
            open_runs[(tag, int(pid))] = float(at)
        else:
            done.append(Run(tag, int(pid), open_runs.pop((tag, int(pid))), float(at)))
    return done + [Run(tag, pid, start, None) for (tag, pid), start in open_runs.items()]


def most_at_once(runs: list[Run], ends: dict[int, float]) -> int:
    """The most runs inside at one moment; a run that never finished counts until its
    process's end (``ends``: pid -> when it was killed)."""
    events: list[tuple[float, int]] = []
    for run in runs:
        end = run.end if run.end is not None else ends[run.pid]
        events += [(run.start, 1), (end, -1)]
    inside = most = 0
    for _, step in sorted(events, key=lambda event: (event[0], event[1])):  # ends first
        inside += step
        most = max(most, inside)
    return most


@dataclass(frozen=True)
class Jobs:
    app: App
    limited: JobFunction[[str, float], Awaitable[None]]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    app = App(redis_url, namespace=namespace, **{**chaosapp.SETTINGS, **overrides})
    return Jobs(app, limited=app.job(name="limited", queue=QUEUE)(limited))


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    namespace = os.environ[NAMESPACE_ENV]
    recorder.url, recorder.namespace = url, namespace
    return build(url, namespace, **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()
