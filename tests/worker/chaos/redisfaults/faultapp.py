"""The job app of the Redis-fault chaos tests, run by the real CLI:

    cogworker-async run tests.worker.chaos.redisfaults.faultapp:jobs     (cwd: the repository root)

Configured like tests/worker/e2e/jobsapp.py (``E2E_REDIS_URL``, ``E2E_NAMESPACE``,
``E2E_SETTINGS``, set by tests/workerproc.py), plus ``FAULT_WITNESS_URL``: the *witness*
server where jobs record their runs. The witness is never restarted, never behind the
fault proxy and never planted with bad keys, so the evidence survives every fault the
tests inject into the worker's own server (and counting runs adds no commands there).

Every job records each start and each finish on the witness, by tag:
``<ns>:fault:started`` and ``<ns>:fault:ran`` (lists of JSON ``{tag, pid, t}``, one per
event), ``<ns>:fault:ran_tags`` (set of tags that finished at least once) and
``<ns>:fault:last_ran`` (hash pid -> epoch of that process's last finish).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import redis.asyncio

from cogworker_async import App
from cogworker_async.enqueue.handles import JobFunction
from tests.worker.e2e.jobsapp import FAST, NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

WITNESS_ENV: Final = "FAULT_WITNESS_URL"
GATE_TIMEOUT: Final = 60.0
"""Seconds a ``held`` job waits for its gate before giving up (it then fails)."""


def started_key(namespace: str) -> str:
    return f"{namespace}:fault:started"


def ran_key(namespace: str) -> str:
    return f"{namespace}:fault:ran"


def ran_tags_key(namespace: str) -> str:
    return f"{namespace}:fault:ran_tags"


def last_ran_key(namespace: str) -> str:
    return f"{namespace}:fault:last_ran"


def gate_key(namespace: str) -> str:
    return f"{namespace}:fault:gate"


def first_key(namespace: str, tag: str) -> str:
    """Set by the first run of a tag (``die_after``, ``flaky``): later runs behave."""
    return f"{namespace}:fault:first:{tag}"


class _Witness:
    """The witness client of this worker process (created in its event loop)."""

    def __init__(self) -> None:
        self.url = ""
        self.namespace = ""
        self._client: redis.asyncio.Redis | None = None

    def client(self) -> redis.asyncio.Redis:
        if self._client is None:
            self._client = redis.asyncio.Redis.from_url(self.url)
        return self._client

    def _event(self, tag: str) -> str:
        return json.dumps({"tag": tag, "pid": os.getpid(), "t": time.time()})

    async def started(self, tag: str) -> None:
        await self.client().rpush(started_key(self.namespace), self._event(tag))

    async def ran(self, tag: str) -> None:
        ns = self.namespace
        async with self.client().pipeline(transaction=True) as pipe:
            pipe.rpush(ran_key(ns), self._event(tag))
            pipe.sadd(ran_tags_key(ns), tag)
            pipe.hset(last_ran_key(ns), str(os.getpid()), repr(time.time()))
            await pipe.execute()

    async def first_run(self, tag: str) -> bool:
        return bool(await self.client().set(first_key(self.namespace, tag), "1", nx=True))

    async def gate_open(self) -> bool:
        return bool(await self.client().exists(gate_key(self.namespace)))


witness = _Witness()


async def record(tag: str) -> None:
    """Succeeds at once; records its start and finish."""
    await witness.started(tag)
    await witness.ran(tag)


async def die_after(tag: str) -> None:
    """Runs to its end, then (first run only) SIGKILLs its own worker as its very last
    statement: the body finished, the ack was never written."""
    await witness.started(tag)
    await witness.ran(tag)
    if await witness.first_run(tag):
        os.kill(os.getpid(), signal.SIGKILL)


async def held(tag: str) -> None:
    """Starts, then waits until the test opens the gate, then finishes."""
    await witness.started(tag)
    with anyio.fail_after(GATE_TIMEOUT):
        while not await witness.gate_open():
            await anyio.sleep(0.02)
    await witness.ran(tag)


async def flaky(tag: str) -> None:
    """Fails on its first run (after recording the start), succeeds on the next."""
    await witness.started(tag)
    if await witness.first_run(tag):
        raise RuntimeError(f"first run of {tag} fails")
    await witness.ran(tag)


@dataclass(frozen=True)
class Jobs:
    """The App and its registered jobs (to enqueue from a test)."""

    app: App
    record: JobFunction[[str], Awaitable[None]]
    die_after: JobFunction[[str], Awaitable[None]]
    held: JobFunction[[str], Awaitable[None]]
    flaky: JobFunction[[str], Awaitable[None]]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    """The App on ``redis_url`` and ``namespace`` (fast settings), its jobs registered."""
    app = App(redis_url, namespace=namespace, **{**FAST, **overrides})
    return Jobs(
        app,
        record=app.job(name="record")(record),
        die_after=app.job(name="die_after")(die_after),
        held=app.job(name="held")(held),
        flaky=app.job(name="flaky", retry=3)(flaky),
    )


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    namespace = os.environ[NAMESPACE_ENV]
    witness.url, witness.namespace = os.environ.get(WITNESS_ENV) or url, namespace
    return build(url, namespace, **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()
