"""The job app of the liveness-through-restarts scenario (test_liveness_restarts.py), run
by the real CLI:

    cogworker-async run tests.worker.chaos.redisfaults.workflowapp:jobs   (cwd: the repository root)

Configured like faultapp.py (``E2E_REDIS_URL``, ``E2E_NAMESPACE``, ``E2E_SETTINGS`` and
``FAULT_WITNESS_URL``). Its jobs are workflow pieces — batch members, a member that opens
a child batch, a batch's callback, dependency-tree nodes, chain steps with pass_result —
and each records what it does, in order, as one entry of one list on the *witness*
(``events_key``; never restarted, so the evidence survives every restart of the
workers' own server, and the list's order is the order across processes):

- ``S <tag> <pid>`` when a run starts, ``F <tag> <pid>`` when it finishes;
- ``I <tag> <pid> <bid>`` when a ``nest`` run is inside its child batch's block.

A chain step's tag is ``<tag>=<value it was handed>``, a callback's ``<kind>:<bid>``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import redis.asyncio

from cogworker_async import App, current_job
from cogworker_async.enqueue.handles import JobFunction
from tests.worker.chaos.redisfaults.faultapp import WITNESS_ENV
from tests.worker.e2e.jobsapp import NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

TARGET: Final = "tests.worker.chaos.redisfaults.workflowapp:jobs"


def events_key(namespace: str) -> str:
    return f"{namespace}:wf:events"


class _Recorder:
    """The witness client of this worker process (made in its event loop, on first use)."""

    def __init__(self) -> None:
        self.url = ""
        self.namespace = ""
        self._client: redis.asyncio.Redis | None = None

    async def say(self, *words: str) -> None:
        if self._client is None:
            self._client = redis.asyncio.Redis.from_url(self.url)
        await self._client.rpush(events_key(self.namespace),
                                 " ".join([*words[:2], str(os.getpid()), *words[2:]]))


recorder = _Recorder()


async def work(tag: str, seconds: float) -> None:
    """A plain member or a tree node: records its start and finish around a sleep."""
    await recorder.say("S", tag)
    await anyio.sleep(seconds)
    await recorder.say("F", tag)


async def callback(kind: str) -> None:
    """A batch's callback: records ``<kind>:<bid>``."""
    tag = f"{kind}:{current_job().batch_id}"
    await recorder.say("S", tag)
    await recorder.say("F", tag)


async def chained(value: int, tag: str) -> int:
    """A chain step with pass_result: records the value it was handed, returns the next."""
    await recorder.say("S", f"{tag}={value}")
    await anyio.sleep(0.05)
    await recorder.say("F", f"{tag}={value}")
    return value + 1


def _nest(app: App, work_job: JobFunction[[str, float], Awaitable[None]],
          callback_job: JobFunction[[str], Awaitable[None]]
          ) -> Callable[[str, int, float], Awaitable[None]]:
    async def nest(tag: str, members: int, hold: float) -> None:
        """A batch member that opens a child batch (its parent: this job's batch), says
        it is inside the block, holds it ``hold`` s (a restart on that event lands
        there), adds ``members`` jobs and exits the block. A run that meets Redis away
        inside its block raises (its child ends abandoned) and is retried."""
        await recorder.say("S", tag)
        async with app.batch(f"child of {tag}", on_complete=callback_job.s("child")) as child:
            await recorder.say("I", tag, child.bid)
            await anyio.sleep(hold)
            for m in range(members):
                await work_job.enqueue(f"{tag}k{m}", 0.05)
        await recorder.say("F", tag)

    return nest


@dataclass(frozen=True)
class Jobs:
    app: App
    work: JobFunction[[str, float], Awaitable[None]]
    callback: JobFunction[[str], Awaitable[None]]
    chained: JobFunction[[int, str], Awaitable[int]]
    nest: JobFunction[[str, int, float], Awaitable[None]]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    app = App(redis_url, namespace=namespace, **overrides)
    work_job: JobFunction[[str, float], Awaitable[None]] = app.job(name="work")(work)
    callback_job: JobFunction[[str], Awaitable[None]] = app.job(name="callback")(callback)
    return Jobs(app, work=work_job, callback=callback_job,
                chained=app.job(name="chained", keep_result=3600)(chained),
                nest=app.job(name="nest")(_nest(app, work_job, callback_job)))


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    recorder.url, recorder.namespace = os.environ.get(WITNESS_ENV) or url, os.environ[NAMESPACE_ENV]
    return build(url, recorder.namespace, **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()
