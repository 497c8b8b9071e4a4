"""The job app of the Redis Cluster scenarios, run by the real CLI:

    cogworker-async run tests.redis.cluster.clusterapp:jobs      (cwd: the repository root)

Configured from the environment as tests/worker/e2e/jobsapp.py is (``E2E_REDIS_URL``,
``E2E_NAMESPACE``, ``E2E_SETTINGS``: JSON settings, ``queues`` included). One job,
``work``, records its start and finish as ``"<tag> <pid>"`` entries of two lists under
the ``{rec}`` hash tag (one slot: a test picks which master it must not kill).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

import anyio
import redis.asyncio

from cogworker_async import App, current_job
from cogworker_async.enqueue.handles import JobFunction
from tests.clients import async_client
from tests.worker.e2e.jobsapp import NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

SETTINGS: Final[dict[str, Any]] = {
    "poll_interval": 0.1,
    "retry_base_delay": 0.0,
    "shutdown_timeout": 2.0,
    "idle_fetch_interval": 0.2,
    "heartbeat_interval": 0.3,
    "orphan_threshold": 2.0,
    "recovery_interval": 0.5,
    "max_orphanings": 5,
}

TARGET: Final = "tests.redis.cluster.clusterapp:jobs"
RECORD_TAG: Final = "rec"


def started_key(namespace: str) -> str:
    return f"{namespace}:{{{RECORD_TAG}}}:started"


def finished_key(namespace: str) -> str:
    return f"{namespace}:{{{RECORD_TAG}}}:finished"


async def counts(r: redis.asyncio.Redis, key: str) -> Counter[str]:
    """tag -> how many entries the record list has for it."""
    return Counter(entry.decode().split(" ")[0] for entry in await r.lrange(key, 0, -1))


class _Recorder:
    def __init__(self) -> None:
        self.url = ""
        self.namespace = ""
        self._client: redis.asyncio.Redis | None = None

    def client(self) -> redis.asyncio.Redis:
        if self._client is None:  # in the worker's (only) event loop, on first use
            self._client = async_client(self.url)
        return self._client

    async def record(self, key: str, tag: str) -> None:
        # A record is the test's evidence: written through a failover (retried by the
        # cluster client, which may write it twice — counted as what it is, a record).
        await self.client().rpush(key, f"{tag} {os.getpid()}")


recorder = _Recorder()


async def work(tag: str, seconds: float) -> None:
    await recorder.record(started_key(recorder.namespace), tag)
    await anyio.sleep(seconds)
    await recorder.record(finished_key(recorder.namespace), tag)


def events_key(namespace: str) -> str:
    """One list of "S <tag>" / "F <tag>" entries: the order of starts and finishes."""
    return f"{namespace}:{{{RECORD_TAG}}}:events"


async def node(tag: str, seconds: float) -> None:
    """A job of a chain: its start and finish also in one list, in order."""
    await recorder.record(started_key(recorder.namespace), tag)
    await recorder.client().rpush(events_key(recorder.namespace), f"S {tag}")
    await anyio.sleep(seconds)
    await recorder.client().rpush(events_key(recorder.namespace), f"F {tag}")
    await recorder.record(finished_key(recorder.namespace), tag)


async def callback(kind: str) -> None:
    """A batch's callback: records ``<kind>:<bid>``."""
    tag = f"{kind}:{current_job().batch_id}"
    await recorder.record(started_key(recorder.namespace), tag)
    await recorder.record(finished_key(recorder.namespace), tag)


@dataclass(frozen=True)
class Jobs:
    app: App
    work: JobFunction[[str, float], Any]
    node: JobFunction[[str, float], Any]
    callback: JobFunction[[str], Any]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    app = App(redis_url, namespace=namespace, **{**SETTINGS, **overrides})
    return Jobs(app, work=app.job(name="work")(work), node=app.job(name="node")(node),
                callback=app.job(name="callback")(callback))


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    namespace = os.environ[NAMESPACE_ENV]
    recorder.url, recorder.namespace = url, namespace
    return build(url, namespace, **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()
