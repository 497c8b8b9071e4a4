"""The job app of the lifespan tests, run by the real CLI:

    cogworker-async run tests.worker.e2e.lifespanapp:jobs      (cwd: the repository root)

Configured from the environment as ``jobsapp`` is (``E2E_REDIS_URL``, ``E2E_NAMESPACE``,
``E2E_SETTINGS``), and ``LIFESPAN_FAIL=1``: the lifespan raises as it is entered. Every
step is a line of the Redis list ``<ns>:lifespan:events`` — ``enter <pid>``, ``start
<tag> <pid>``, ``end <tag> <pid>``, ``exit <pid>`` — written before the step goes on, so
a test reads their order across processes. ``hold(tag, seconds)`` reads the lifespan's
state (the pid that entered it) and holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any, Final

import anyio
import redis

from cogworker_async import App, current_job
from tests.clients import sync_client
from tests.worker.e2e.jobsapp import FAST, NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

FAIL_ENV: Final = "LIFESPAN_FAIL"


def events_key(namespace: str) -> str:
    return f"{namespace}:lifespan:events"


def build(url: str, namespace: str, **overrides: Any) -> App:
    app = App(url, namespace=namespace, **{**FAST, **overrides})
    client: list[redis.Redis] = []

    def note(event: str) -> None:  # blocking: also from the plain job's thread
        if not client:
            client.append(sync_client(url))
        client[0].rpush(events_key(namespace), event)

    @app.lifespan
    async def resources() -> AsyncIterator[dict[str, int]]:
        note(f"enter {os.getpid()}")
        if os.environ.get(FAIL_ENV) == "1":
            raise RuntimeError("the database is down")
        try:
            yield {"pid": os.getpid()}
        finally:
            note(f"exit {os.getpid()}")

    @app.job(name="hold", retry=0)
    async def hold(tag: str, seconds: float) -> None:
        assert current_job().state == {"pid": os.getpid()}
        note(f"start {tag} {os.getpid()}")
        await anyio.sleep(seconds)  # a hard stop cancels it here: no end is noted
        note(f"end {tag} {os.getpid()}")

    @app.job(name="plain", retry=0)
    def plain(tag: str) -> None:
        assert current_job().state == {"pid": os.getpid()}
        note(f"start {tag} {os.getpid()}")
        note(f"end {tag} {os.getpid()}")

    return app


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    return build(url, os.environ[NAMESPACE_ENV],
                 **json.loads(os.environ.get(SETTINGS_ENV) or "{}"))


jobs = _from_env()
