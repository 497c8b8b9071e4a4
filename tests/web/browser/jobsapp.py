"""The App the browser tests show: served by ``cogworker-async web`` and worked by
``cogworker-async run`` (both subprocesses, cwd the repository root), and built by the
test process with ``build(url, namespace)`` to enqueue.

Configured from the environment like ``tests/worker/e2e/jobsapp.py`` (same variable names, so
``tests/workerproc.WorkerProcess`` starts it). Jobs record each finished run in Redis:
``<ns>:browser:ran`` (a list of tags), so the test sees a job run in another process.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Final

import anyio
import redis.asyncio

from cogworker_async import App
from cogworker_async.enqueue.handles import JobFunction
from tests.worker.e2e.jobsapp import FAST, NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

TARGET: Final = "tests.web.browser.jobsapp:jobs"
HOUR: Final = 3600.0
QUEUES: Final = ["default", "reports"]


def ran_key(namespace: str) -> str:
    return f"{namespace}:browser:ran"


def healed_key(namespace: str) -> str:
    """Set by a test: from then on ``flaky`` succeeds (it "was fixed")."""
    return f"{namespace}:browser:healed"


class _Where:
    url = ""
    namespace = ""


where = _Where()


async def _client() -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(where.url)


async def record(tag: str) -> None:
    async with await _client() as client:
        await client.rpush(ran_key(where.namespace), tag)


async def flaky(tag: str) -> None:
    """Fails until the test sets the healed flag, then records its run."""
    async with await _client() as client:
        if not await client.exists(healed_key(where.namespace)):
            raise RuntimeError(f"not fixed yet: {tag}")
    await record(tag)


async def slow(tag: str, seconds: float) -> None:
    await anyio.sleep(seconds)
    await record(tag)


async def nightly() -> None:
    await record("nightly")


@dataclass(frozen=True)
class Jobs:
    app: App
    record: JobFunction[[str], Any]
    flaky: JobFunction[[str], Any]
    failing: JobFunction[[str], Any]
    slow: JobFunction[[str, float], Any]
    report: JobFunction[[str], Any]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    app = App(redis_url, namespace=namespace, queues=QUEUES, **{**FAST, **overrides})
    app.periodic("0 3 * * *", name="nightly")(nightly)
    return Jobs(
        app,
        record=app.job(name="record")(record),
        # Straight to dead when it fails: the Dead tab's retry is what runs it again.
        flaky=app.job(name="flaky", retry=False)(flaky),
        # Fails, then waits an hour for its next try: it stays on the Retries tab.
        failing=app.job(name="failing", retry=3, retry_in=lambda attempt, error: HOUR)(flaky),
        slow=app.job(name="slow")(slow),
        # A queue the test's worker does not work: its jobs stay to be looked at.
        report=app.job(name="report", queue="reports")(record),
    )


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    where.url, where.namespace = url, os.environ[NAMESPACE_ENV]
    return build(url, where.namespace, **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()
