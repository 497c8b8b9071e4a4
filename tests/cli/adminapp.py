"""The job app the admin CLI tests point the CLI at: ``tests.cli.adminapp:jobs``.

The CLI reads the App from ``jobs``; the test process builds the same App with
``build(namespace, url)`` to enqueue and to run a worker. Both register the jobs under
the same explicit names, so payloads match whichever copy made them.

``jobs`` is made when it is asked for (a module ``__getattr__``), from
``$COGWORKER_REDIS_URL`` and ``$ADMIN_NAMESPACE`` as they are then: each test sets its
own namespace, and the module, imported once, must not keep the first test's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final

import anyio

from cogworker_async import App
from cogworker_async.enqueue.handles import JobFunction
from tests.conftest import FAST

NAMESPACE_ENV: Final = "ADMIN_NAMESPACE"
TARGET: Final = "tests.cli.adminapp:jobs"
LATER: Final = 3600.0
"""Seconds a failed ``flaky`` job waits for its next try: it stays in retries."""
HOLD_LIMIT: Final = 30.0
"""Seconds ``hold`` waits for ``release`` at most (a test that forgets fails, not hangs)."""

release = threading.Event()
"""Set to let running ``hold`` jobs finish (the worker runs in the test's process)."""


async def ok(tag: str) -> None:
    """Succeeds."""


async def flaky(tag: str) -> None:
    """Fails; retried an hour later (it waits in retries)."""
    raise RuntimeError(f"flaky {tag}")


async def doomed(tag: str) -> None:
    """Fails with no retries: straight to dead."""
    raise ValueError(f"doomed {tag}")


async def hold() -> None:
    """Runs until ``release`` is set: a busy processor to look at."""
    with anyio.fail_after(HOLD_LIMIT):
        while not release.is_set():
            await anyio.sleep(0.01)


async def tick() -> None:
    """A periodic job (hourly)."""


@dataclass(frozen=True)
class Jobs:
    app: App
    ok: JobFunction[[str], Awaitable[None]]
    flaky: JobFunction[[str], Awaitable[None]]
    doomed: JobFunction[[str], Awaitable[None]]
    hold: JobFunction[[], Awaitable[None]]


def build(namespace: str, redis_url: str | None = None, *, periodic: bool = False,
          **overrides: Any) -> Jobs:
    """The App on ``namespace`` (and ``redis_url``, else ``$COGWORKER_REDIS_URL``).

    ``periodic``: register the hourly ``tick``. Only the CLI's App does: a test worker
    started just after the hour would enqueue it and throw the tests' counts off."""
    app = App(redis_url, namespace=namespace, **{**FAST, **overrides})
    if periodic:
        app.periodic("0 * * * *", name="tick")(tick)
    return Jobs(
        app,
        ok=app.job(name="ok")(ok),
        flaky=app.job(name="flaky", retry_in=lambda attempt, error: LATER)(flaky),
        doomed=app.job(name="doomed", retry=False)(doomed),
        hold=app.job(name="hold")(hold),
    )


def __getattr__(name: str) -> App:
    if name == "jobs" and NAMESPACE_ENV in os.environ:
        return build(os.environ[NAMESPACE_ENV], periodic=True).app
    raise AttributeError(name)
