"""The job app the deployment tests run with the real CLI:

    cogworker-async run tests.redis.deploy.deployapp:jobs      (cwd: the repository root)

The worker subprocess connects with ``E2E_REDIS_URL`` (the Redis user under test: an ACL
user, or a ``rediss://`` URL) in namespace ``E2E_NAMESPACE``, as tests/workerproc.py
sets them. Jobs record each run through ``DEPLOY_RECORD_URL`` instead (the server's
default user): the recording is the test's bookkeeping, not the worker's, and must not
widen the ACL under test. ``DEPLOY_PERIODIC=1`` registers the per-second ``tick`` (only
the worker does: the test's own App must not claim ticks).
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final

import redis.asyncio

from cogworker_async import App
from cogworker_async.enqueue.handles import JobFunction
from tests.worker.e2e.jobsapp import FAST, NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

RECORD_URL_ENV: Final = "DEPLOY_RECORD_URL"
PERIODIC_ENV: Final = "DEPLOY_PERIODIC"
TARGET: Final = "tests.redis.deploy.deployapp:jobs"
ADMIN_TARGET: Final = "tests.redis.deploy.deployapp:admin_jobs"
NAMESPACE: Final = "cogworker"
"""The default namespace: each test has a private server, and the documented ACL names it."""
RAN_KEY: Final = "deploy-test:ran"
"""List of tags, one per finished run (outside any namespace an ACL user may touch)."""
TICK: Final = "tick"


class _Recorder:
    def __init__(self) -> None:
        self.url = ""
        self._client: redis.asyncio.Redis | None = None

    async def ran(self, tag: str) -> None:
        # Created in the worker's (only) event loop, on first use.
        if self._client is None:
            self._client = redis.asyncio.Redis.from_url(self.url)
        await self._client.rpush(RAN_KEY, tag)


recorder = _Recorder()


async def record(tag: str) -> None:
    await recorder.ran(tag)


async def fail(tag: str) -> None:
    await recorder.ran(tag)
    raise RuntimeError(f"boom {tag}")


async def tick() -> None:
    await recorder.ran(TICK)


@dataclass(frozen=True)
class Jobs:
    app: App
    record: JobFunction[[str], Awaitable[None]]
    unique: JobFunction[[str], Awaitable[None]]
    fail: JobFunction[[str], Awaitable[None]]


def build(redis_url: str, namespace: str, *, periodic: bool = False,
          **overrides: Any) -> Jobs:
    app = App(redis_url, namespace=namespace, **{**FAST, **overrides})
    if periodic:
        app.periodic("* * * * * *", name=TICK)(tick)
    return Jobs(
        app,
        record=app.job(name="record")(record),
        unique=app.job(name="unique", unique=True)(record),
        # One retry, at once (FAST: no base delay), then dead.
        fail=app.job(name="fail", retry=1)(fail),
    )


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    recorder.url = os.environ[RECORD_URL_ENV]
    settings = json.loads(os.environ.get(SETTINGS_ENV) or "{}")
    return build(url, os.environ[NAMESPACE_ENV], periodic=os.environ.get(PERIODIC_ENV) == "1",
                 **settings).app


jobs = _from_env()


def __getattr__(name: str) -> App:
    """``admin_jobs``: the App the admin CLI loads (``ADMIN_TARGET``) in the test process;
    the CLI gets the server as ``--redis-url``, so the URL here is never used."""
    if name == "admin_jobs":
        return build("redis://127.0.0.1:1/0", NAMESPACE, periodic=True).app
    raise AttributeError(name)
