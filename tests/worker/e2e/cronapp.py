"""A job app with two per-second periodic jobs, for the multi-process cron test:

    cogworker-async run tests.worker.e2e.cronapp:jobs

``tick`` records each tick it runs for (``<ns>:cron:ticks``); ``long`` runs 1.5 s, longer
than its schedule's period, and records its start and end (``<ns>:cron:spans``), so the
test can check that its runs never overlap.
"""

from __future__ import annotations

import json
import os
import time

import anyio
import redis.asyncio

from cogworker_async import App, current_job
from tests.clients import async_client
from tests.worker.e2e.jobsapp import FAST, NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

LONG_RUN = 1.5


def build(url: str, namespace: str) -> App:
    app = App(url, namespace=namespace, **{**FAST, **json.loads(
        os.environ.get(SETTINGS_ENV) or "{}")})
    client: list[redis.asyncio.Redis] = []

    def r() -> redis.asyncio.Redis:
        if not client:
            client.append(async_client(url))
        return client[0]

    @app.periodic("* * * * * *", name="tick")
    async def tick() -> None:
        await r().rpush(f"{namespace}:cron:ticks", repr(current_job().payload["periodic_tick"]))

    @app.periodic("* * * * * *", name="long")
    async def long() -> None:
        began = time.time()
        await anyio.sleep(LONG_RUN)
        await r().rpush(f"{namespace}:cron:spans", json.dumps([began, time.time()]))

    return app


url = os.environ.get(URL_ENV)
jobs = build(url, os.environ[NAMESPACE_ENV]) if url else None
