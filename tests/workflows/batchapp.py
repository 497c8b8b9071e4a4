"""The job app of the batch tests that kill a worker inside a batch block:

    cogworker-async run tests.workflows.batchapp:jobs     (cwd: the repository root)

Configured as ``tests/worker/e2e/jobsapp.py`` is (``E2E_REDIS_URL``, ``E2E_NAMESPACE``,
``E2E_SETTINGS``). ``spawner`` opens a child batch (it is a member of a batch) and, on its
first run, says it is inside the block (``inside_key``) and hangs there: the test kills
its process. Its recovered run fills the child and exits the block. Each callback run is
appended to ``calls_key`` as "<kind> <bid>".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import anyio

from cogworker_async import App, current_job
from cogworker_async.enqueue.handles import JobFunction
from tests.clients import async_client
from tests.worker.e2e.jobsapp import FAST, NAMESPACE_ENV, SETTINGS_ENV, URL_ENV


def inside_key(namespace: str) -> str:
    return f"{namespace}:test:inside"


def calls_key(namespace: str) -> str:
    return f"{namespace}:test:calls"


@dataclass(frozen=True)
class Jobs:
    app: App
    called: JobFunction[..., Any]
    spawner: JobFunction[..., Any]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    app = App(redis_url, namespace=namespace, track_jobs=True, **{**FAST, **overrides})

    @app.job(name="leaf", retry=0)
    async def leaf(n: int) -> int:
        return n

    @app.job(name="called", retry=0)
    async def called(kind: str) -> None:
        client = async_client(redis_url)
        try:
            await client.rpush(calls_key(namespace), f"{kind} {current_job().batch_id}")
        finally:
            await client.aclose()

    @app.job(name="spawner", retry=0)
    async def spawner(reopen: str | None) -> None:
        first = not await current_job().was_recovered()
        block = (app.batch(bid=reopen) if reopen else
                 app.batch("child", on_complete=called.s("child")))
        async with block:
            # A new child's member of the first run waits an hour: nobody but the reaper
            # ends it. What a dead reopener added stays a member of the batch it
            # reopened (nobody knows which it added): that one runs at once.
            await leaf.enqueue_in(3600 if first and not reopen else 0, 1)
            if first:
                client = async_client(redis_url)
                try:
                    await client.set(inside_key(namespace), "1")
                finally:
                    await client.aclose()
                await anyio.sleep(3600)  # killed here

    return Jobs(app, called, spawner)


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None
    settings = json.loads(os.environ.get(SETTINGS_ENV) or "{}")
    return build(url, os.environ[NAMESPACE_ENV], **settings).app


jobs = _from_env()
