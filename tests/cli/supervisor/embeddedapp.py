"""An App on the embedded server (no URL): its data dir from ``$COGWORKER_DATA_DIR``,
its namespace from ``$E2E_NAMESPACE`` (tests/cli/supervisor/test_embedded_ctrl_c.py)."""

from __future__ import annotations

import os

import anyio

from cogworker_async import App, current_job

jobs = App(namespace=os.environ.get("E2E_NAMESPACE", "fleet"), shutdown_timeout=20.0,
           track_jobs=True)


@jobs.job(name="slow")
async def slow(seconds: float) -> str:
    await current_job().set_progress(0.0, "started")  # the test waits for it: it runs
    await anyio.sleep(seconds)
    return "done"
