"""The job app of the "jobs as values" chaos tests (cancel across a crash, results under
a SIGKILL storm), run by the real CLI:

    cogworker-async run tests.worker.chaos.processes.valuesapp:jobs    (cwd: the repository root)

Configured like ``chaosapp`` (same environment, same fast settings). Its own module so
that chaosapp's jobs stay as its scenarios know them.

- ``hold`` counts each start of a run by jid (hash ``starts_key``), then runs ``first``
  seconds on its first start and ``again`` seconds on any later one, and counts its
  finish (``finishes_key``): a first run outlasts the test, so only a kill or a cancel
  ends it, and a recovered run ends at once. Each count is awaited before the job goes
  on: a run killed at any point has left exactly what it got to.
- ``valued`` records its start and finish in chaosapp's lists (``"<tag> <pid>"``, so the
  storm's machinery counts its runs) and keeps its result: ``{"n": n, "pid": pid}``, a
  value derived from its arguments plus the process that ran it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import anyio
import redis.asyncio

from cogworker_async import App, current_job
from cogworker_async.enqueue.handles import JobFunction
from tests.worker.chaos.processes import chaosapp
from tests.worker.e2e.jobsapp import NAMESPACE_ENV, SETTINGS_ENV, URL_ENV
from tests.workerproc import WorkerProcess

if TYPE_CHECKING:
    from tests.worker.chaos.processes.conftest import Fleet

TARGET: Final = "tests.worker.chaos.processes.valuesapp:jobs"
KEEP_RESULT: Final = 3600.0
"""Seconds ``valued`` keeps its result: far longer than any scenario."""


def starts_key(namespace: str) -> str:
    return f"{namespace}:values:starts"


def finishes_key(namespace: str) -> str:
    return f"{namespace}:values:finishes"


async def counts(r: redis.asyncio.Redis, key: str) -> dict[str, int]:
    """jid -> its count in a ``hold`` counter hash."""
    return {(k.decode() if isinstance(k, bytes) else k): int(v)
            for k, v in (await r.hgetall(key)).items()}


store = chaosapp.recorder
"""chaosapp's recorder: the worker's Redis and namespace (set from the environment
when chaosapp is imported in a worker process; again below)."""


async def hold(first: float, again: float) -> None:
    jid = current_job().jid
    client = store.client()
    started = await client.hincrby(starts_key(store.namespace), jid, 1)
    await anyio.sleep(first if started == 1 else again)
    await client.hincrby(finishes_key(store.namespace), jid, 1)


async def valued(tag: str, n: int, seconds: float) -> dict[str, int]:
    await store.started(tag)
    await anyio.sleep(seconds)
    await store.finished(tag)
    return {"n": n, "pid": os.getpid()}


@dataclass(frozen=True)
class Jobs:
    app: App
    hold: JobFunction[[float, float], Awaitable[None]]
    valued: JobFunction[[str, int, float], Awaitable[dict[str, int]]]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    app = App(redis_url, namespace=namespace, **{**chaosapp.SETTINGS, **overrides})
    return Jobs(
        app,
        hold=app.job(name="hold")(hold),
        valued=app.job(name="valued", keep_result=KEEP_RESULT)(valued),
    )


def start_in(fleet: Fleet, *args: str, **settings: Any) -> WorkerProcess:
    """A new worker process running these jobs, owned by a chaos ``fleet`` (which kills
    it by pid at teardown and prints its log if the test failed)."""
    worker = WorkerProcess(fleet.url, fleet.namespace, settings,
                           ["--log-level", "WARNING", *args], target=TARGET)
    fleet.started.append(worker)
    return worker.start()


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    namespace = os.environ[NAMESPACE_ENV]
    store.url, store.namespace = url, namespace
    return build(url, namespace, **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()
