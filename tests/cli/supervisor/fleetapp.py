"""The job app of tests/cli/supervisor/test_supervisor_hardening.py, run by the real CLI under
``run --processes``: jobs that end or bloat their own process. Configured as
tests/worker/chaos/processes/chaosapp.py is (``E2E_REDIS_URL``, ``E2E_NAMESPACE``,
``E2E_SETTINGS``), recording starts and finishes in the same lists.

Under a supervisor, each child caps its own address space (``RLIMIT_AS``, a safety net
under the supervisor's ``--max-memory``): a memory test that goes wrong fails with a
MemoryError in the job, not with a machine out of memory.
"""

from __future__ import annotations

import json
import os
import resource
import time
from typing import Any, Final

import redis

from cogworker_async import App, environment
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.chaosapp import recorder
from tests.worker.e2e.jobsapp import NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

MIB: Final = 1024**2
HEADROOM: Final = 1024 * MIB
"""Address space a child may take beyond what it has at import (threads reserve some)."""
HOLD: Final = 60.0
"""Seconds a hog holds its memory (far longer than any test waits for its kill)."""
STEP: Final = 0.02
"""Seconds between a hog's MiB (time for the supervisor to see it grow)."""

TARGET: Final = "tests.cli.supervisor.fleetapp:jobs"


async def exit2(tag: str) -> None:
    """Ends its process with status 2 (a job calling os._exit(2), a C library's exit)."""
    await recorder.started(tag)
    os._exit(2)


async def hog(tag: str, mib: int) -> None:
    """Allocates ``mib`` MiB while blocking the event loop (a SIGTERM handler in the loop
    never runs), then holds it."""
    await recorder.started(tag)
    held = []
    for _ in range(mib):
        held.append(b"x" * MIB)  # written: resident, unlike calloc'ed zeros
        time.sleep(STEP)  # blocks the loop: the point of the job
    time.sleep(HOLD)
    await recorder.finished(tag)


def plain_hog(tag: str, mib: int) -> None:
    """A plain function (run in a thread): allocates ``mib`` MiB, then holds it."""
    client = redis.Redis.from_url(recorder.url)
    client.rpush(chaosapp.started_key(recorder.namespace), f"{tag} {os.getpid()}")
    held = []
    for _ in range(mib):
        held.append(b"x" * MIB)
        time.sleep(STEP)
    time.sleep(HOLD)
    client.rpush(chaosapp.finished_key(recorder.namespace), f"{tag} {os.getpid()}")


def build(redis_url: str, namespace: str, **overrides: Any) -> App:
    app = App(redis_url, namespace=namespace, **{**chaosapp.SETTINGS, **overrides})
    app.job(name="work")(chaosapp.work)
    app.job(name="exit2")(exit2)
    app.job(name="hog")(hog)
    app.job(name="plain_hog")(plain_hog)
    return app


def _cap_memory() -> None:
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + HEADROOM, size + HEADROOM))


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    if environment.supervisor():
        _cap_memory()
    namespace = os.environ[NAMESPACE_ENV]
    recorder.url, recorder.namespace = url, namespace
    return build(url, namespace, **json.loads(os.environ.get(SETTINGS_ENV) or "{}"))


jobs = _from_env()
