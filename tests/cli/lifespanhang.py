"""The job app of the lifespan signal and exit tests (issue 40, defects 9 and 24), run
by the real CLI:

    cogworker-async run tests.cli.lifespanhang:jobs      (cwd: the repository root)

Configured from the environment as ``tests/worker/e2e/jobsapp.py`` is (``E2E_REDIS_URL``,
``E2E_NAMESPACE``, ``E2E_SETTINGS``), and ``LIFESPAN_MODE``, what the lifespan does:

- ``hang``: it awaits for good as it is entered (a database that never answers); a
  cancel reaches it (it notes ``cancelled <pid>`` as it unwinds);
- ``stubborn``: it awaits for good, shielded from any cancel;
- ``block``: it blocks the event loop for good (a synchronous connect);
- ``exit_raises``: it enters, and raises as it is exited.

Each step is a line of the Redis list ``<ns>:lifespan:events`` (``enter <pid>``,
``cancelled <pid>``, ``ran <tag> <pid>``, ``exit <pid>``), written before the step goes
on.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any, Final

import anyio
import redis

from cogworker_async import App
from tests.clients import sync_client
from tests.worker.e2e.jobsapp import FAST, NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

MODE_ENV: Final = "LIFESPAN_MODE"
TARGET: Final = "tests.cli.lifespanhang:jobs"
HOUR: Final = 3600.0


def events_key(namespace: str) -> str:
    return f"{namespace}:lifespan:events"


def build(url: str, namespace: str, **overrides: Any) -> App:
    app = App(url, namespace=namespace, **{**FAST, **overrides})
    client: list[redis.Redis] = []

    def note(event: str) -> None:
        if not client:
            client.append(sync_client(url))
        client[0].rpush(events_key(namespace), event)

    @app.lifespan
    async def resources() -> AsyncIterator[dict[str, int]]:
        pid = os.getpid()
        mode = os.environ.get(MODE_ENV, "")
        note(f"enter {pid}")
        if mode == "hang":
            try:
                await anyio.sleep(HOUR)
            finally:
                note(f"cancelled {pid}")
        elif mode == "stubborn":
            with anyio.CancelScope(shield=True):
                await anyio.sleep(HOUR)
        elif mode == "block":
            time.sleep(HOUR)
        yield {"pid": pid}
        note(f"exit {pid}")
        if mode == "exit_raises":
            raise RuntimeError("the pool would not close")

    @app.job(name="work", retry=0, keep_result=600)
    async def work(tag: str) -> str:
        note(f"ran {tag} {os.getpid()}")
        return tag

    return app


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    return build(url, os.environ[NAMESPACE_ENV],
                 **json.loads(os.environ.get(SETTINGS_ENV) or "{}"))


jobs = _from_env()
