"""The job app the end-to-end tests run with the real CLI:

    cogworker-async run tests.worker.e2e.jobsapp:jobs      (cwd: the repository root)

The worker subprocess configures it from the environment (``E2E_REDIS_URL``,
``E2E_NAMESPACE``, and ``E2E_SETTINGS``: JSON overrides of the fast defaults below). The
test process builds the same App with ``build(url, namespace)`` to enqueue; both register
the jobs under the same explicit names, so payloads match whatever the module is called.

Every job records each run in Redis, so a test counts runs exactly:
``<ns>:e2e:ran`` (list of tags, one entry per finished run), ``<ns>:e2e:ran_at`` (hash
tag -> epoch seconds of its last run), ``<ns>:e2e:started`` (list of tags, one per start).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import redis
import redis.asyncio

from cogworker_async import App, JobCancelled, current_job
from cogworker_async.enqueue.handles import JobFunction
from tests.clients import async_client, sync_client

URL_ENV: Final = "E2E_REDIS_URL"
NAMESPACE_ENV: Final = "E2E_NAMESPACE"
SETTINGS_ENV: Final = "E2E_SETTINGS"

# A worker that reacts within tens of milliseconds; tests override what they need.
FAST: Final[dict[str, Any]] = {
    "poll_interval": 0.05,
    "retry_base_delay": 0.0,
    "shutdown_timeout": 2.0,
    "idle_fetch_interval": 0.2,
    "heartbeat_interval": 0.2,
    "orphan_threshold": 1.0,
    "recovery_interval": 0.2,
}


# One hash tag for the three: ``ran`` writes two of them in one transaction, which a
# cluster allows within one slot only.
def ran_key(namespace: str) -> str:
    return f"{namespace}:{{e2e}}:ran"


def ran_at_key(namespace: str) -> str:
    return f"{namespace}:{{e2e}}:ran_at"


def started_key(namespace: str) -> str:
    return f"{namespace}:{{e2e}}:started"


class _Recorder:
    """Where jobs write their runs: the worker's Redis, in the worker's namespace."""

    def __init__(self) -> None:
        self.url = ""
        self.namespace = ""
        self._async: redis.asyncio.Redis | None = None

    def client(self) -> redis.asyncio.Redis:
        # Created in the worker's (only) event loop, on first use.
        if self._async is None:
            self._async = async_client(self.url)
        return self._async

    async def started(self, tag: str) -> None:
        await self.client().rpush(started_key(self.namespace), tag)

    async def ran(self, tag: str) -> None:
        async with self.client().pipeline(transaction=True) as pipe:
            pipe.hset(ran_at_key(self.namespace), tag, repr(time.time()))
            pipe.rpush(ran_key(self.namespace), tag)
            await pipe.execute()


recorder = _Recorder()


async def record(tag: str) -> None:
    """Succeeds; records one run."""
    await recorder.ran(tag)


async def fail(tag: str) -> None:
    """Always raises, after recording the run."""
    await recorder.ran(tag)
    raise RuntimeError(f"boom {tag}")


async def sleepy(tag: str, seconds: float) -> None:
    """Records its start, sleeps, records its run (only if it got to the end)."""
    await recorder.started(tag)
    await anyio.sleep(seconds)
    await recorder.ran(tag)


def sleepy_sync(tag: str, seconds: float) -> None:
    """``sleepy`` as a plain function: it runs in a worker thread and can't be cancelled."""
    with sync_client(recorder.url) as client:
        client.rpush(started_key(recorder.namespace), tag)
        time.sleep(seconds)
        client.rpush(ran_key(recorder.namespace), tag)


async def add(a: int, b: int) -> None:
    """Checks its argument types (as a real job would find out); records the run if ok."""
    if not isinstance(a, int) or not isinstance(b, int):
        raise TypeError(f"add() needs two ints, got {type(a).__name__}, {type(b).__name__}")
    await recorder.ran(f"add:{a + b}")


async def compute(n: int) -> dict[str, int]:
    """Returns a value (registered with ``keep_result``); records the run."""
    await recorder.ran(f"compute:{n}")
    return {"n": n, "double": 2 * n}


async def progressing(tag: str, seconds: float) -> None:
    """Reports progress at once, then sleeps (``sleepy`` with a progress report)."""
    await recorder.started(tag)
    for step in range(1, 101):  # a tight loop of reports: coalesced by the worker
        await current_job().set_progress(step / 200, {"tag": tag, "step": step})
    await anyio.sleep(seconds)
    await recorder.ran(tag)


def stoppable(tag: str, seconds: float) -> None:
    """A plain function that stops itself once a cancel is asked for it."""
    job = current_job()
    with sync_client(recorder.url) as client:
        client.rpush(started_key(recorder.namespace), tag)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if job.cancel_requested:
                raise JobCancelled()
            time.sleep(0.01)
        client.rpush(ran_key(recorder.namespace), tag)


async def unjsonable(tag: str) -> object:
    """Returns what JSON cannot hold (registered with ``keep_result``)."""
    await recorder.ran(tag)
    return {tag}


@dataclass(frozen=True)
class Jobs:
    """The App and its registered jobs (to enqueue from a test)."""

    app: App
    record: JobFunction[[str], Awaitable[None]]
    fail: JobFunction[[str], Awaitable[None]]
    sleepy: JobFunction[[str, float], Awaitable[None]]
    sleepy_sync: JobFunction[[str, float], None]
    add: JobFunction[[int, int], Awaitable[None]]
    compute: JobFunction[[int], Awaitable[dict[str, int]]]
    progressing: JobFunction[[str, float], Awaitable[None]]
    stoppable: JobFunction[[str, float], None]
    unjsonable: JobFunction[[str], Awaitable[object]]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    """The App, on ``redis_url`` and ``namespace``, with its jobs registered."""
    app = App(redis_url, namespace=namespace, **{**FAST, **overrides})
    return Jobs(
        app,
        record=app.job(name="record")(record),
        fail=app.job(name="fail")(fail),
        sleepy=app.job(name="sleepy")(sleepy),
        sleepy_sync=app.job(name="sleepy_sync")(sleepy_sync),
        add=app.job(name="add")(add),
        compute=app.job(name="compute", keep_result=60)(compute),
        progressing=app.job(name="progressing")(progressing),
        stoppable=app.job(name="stoppable")(stoppable),
        unjsonable=app.job(name="unjsonable", keep_result=60, retry=3)(unjsonable),
    )


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    namespace = os.environ[NAMESPACE_ENV]
    recorder.url, recorder.namespace = url, namespace
    return build(url, namespace, **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()
