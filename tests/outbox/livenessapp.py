"""The job app of the outbox liveness scenarios (test_outbox_liveness.py): an App whose
outbox is the test's database, run by the real CLI as a worker that also relays
(``cogworker-async run tests.outbox.livenessapp:jobs``), from the environment
(``E2E_REDIS_URL``, ``E2E_NAMESPACE``, ``E2E_SETTINGS``, ``OUTBOX_DB``: the database's
async SQLAlchemy URL).

Its jobs are outboxed workflow pieces: ``opener`` opens a batch inside the job (the
outboxed job that opens the batch, as outbox.py tells users to write it) and adds
members; ``node`` is an outboxed parent or its dependent. Each records what it does, in
order, as one entry of one list (``events_key``; the order across processes):

- ``S <tag> <pid>`` when a run starts, ``F <tag> <pid>`` when it finishes;
- ``O <tag> <pid> <bid>`` when an ``opener`` run is inside its batch's block.

A member's tag is ``<tag>@<bid>`` (its batch's), a callback's ``<kind>:<bid>``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import redis.asyncio
from sqlalchemy.ext.asyncio import create_async_engine

from cogworker_async import App, current_job
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.outbox import Outbox
from tests.clients import async_client
from tests.outbox.outboxapp import DB_ENV
from tests.worker.e2e.jobsapp import NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

TARGET: Final = "tests.outbox.livenessapp:jobs"
OUTBOX_INTERVAL: Final = 0.05
"""Seconds the relay waits after a pass that found fewer rows than a batch."""
OUTBOX_BATCH: Final = 20


def events_key(namespace: str) -> str:
    return f"{namespace}:ol:events"


class _Recorder:
    def __init__(self) -> None:
        self.url = ""
        self.namespace = ""
        self._client: redis.asyncio.Redis | None = None

    async def say(self, *words: str) -> None:
        if self._client is None:  # in the worker's (only) event loop, on first use
            self._client = async_client(self.url)
        await self._client.rpush(events_key(self.namespace),
                                 " ".join([*words[:2], str(os.getpid()), *words[2:]]))


recorder = _Recorder()


async def node(tag: str, seconds: float) -> None:
    """An outboxed parent, or its dependent: records its start and finish around a sleep."""
    await recorder.say("S", tag)
    await anyio.sleep(seconds)
    await recorder.say("F", tag)


async def member(tag: str) -> None:
    """A member of an opener's batch: records ``<tag>@<bid>``."""
    tag = f"{tag}@{current_job().batch_id}"
    await recorder.say("S", tag)
    await recorder.say("F", tag)


async def callback(kind: str) -> None:
    """A batch's callback: records ``<kind>:<bid>``."""
    tag = f"{kind}:{current_job().batch_id}"
    await recorder.say("S", tag)
    await recorder.say("F", tag)


def _opener(app: App, member_job: JobFunction[[str], Awaitable[None]],
            callback_job: JobFunction[[str], Awaitable[None]]
            ) -> Callable[[str, int, float], Awaitable[None]]:
    async def opener(tag: str, members: int, hold: float) -> None:
        """Opens a batch (on_complete, on_success), says it is inside the block, holds it
        ``hold`` s (a kill on that event lands there), adds ``members`` members."""
        await recorder.say("S", tag)
        async with app.batch(f"opened by {tag}", on_complete=callback_job.s("complete"),
                             on_success=callback_job.s("success")) as batch:
            await recorder.say("O", tag, batch.bid)
            await anyio.sleep(hold)
            for m in range(members):
                await member_job.enqueue(f"{tag}m{m}")
        await recorder.say("F", tag)

    return opener


@dataclass(frozen=True)
class Jobs:
    app: App
    opener: JobFunction[[str, int, float], Awaitable[None]]
    member: JobFunction[[str], Awaitable[None]]
    callback: JobFunction[[str], Awaitable[None]]
    node: JobFunction[[str, float], Awaitable[None]]


def build(url: str, namespace: str, db: str, **overrides: Any) -> Jobs:
    """The App on ``url`` and ``namespace``, its outbox the database ``db``."""
    outbox = Outbox(create_async_engine(db), batch=OUTBOX_BATCH, interval=OUTBOX_INTERVAL)
    app = App(url, namespace=namespace, outbox=outbox, **overrides)
    member_job: JobFunction[[str], Awaitable[None]] = app.job(name="member")(member)
    callback_job: JobFunction[[str], Awaitable[None]] = app.job(name="callback")(callback)
    return Jobs(app, opener=app.job(name="opener")(_opener(app, member_job, callback_job)),
                member=member_job, callback=callback_job, node=app.job(name="node")(node))


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    recorder.url, recorder.namespace = url, os.environ[NAMESPACE_ENV]
    return build(url, recorder.namespace, os.environ[DB_ENV],
                 **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()
