"""The Busy tab through a process death: a worker killed mid-job shows as stopped and
awaiting recovery, then another worker's recovery is listed and the job runs again."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio

from cogworker_async.web import create_dashboard
from tests.waiting import wait_until
from tests.web.conftest import BASE_URL
from tests.worker.e2e import jobsapp
from tests.workerproc import WorkerProcess, worker_pool

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def e2e(redis_url: str, namespace: str) -> AsyncIterator[jobsapp.Jobs]:
    jobs = jobsapp.build(redis_url, namespace)
    yield jobs
    await jobs.app.close()


async def _page_has(http: httpx.AsyncClient, *texts: str) -> bool:
    html = (await http.get("/busy")).text
    return all(text in html for text in texts)


async def test_a_killed_worker_awaits_recovery_then_is_recovered(
        e2e: jobsapp.Jobs, redis_url: str, namespace: str) -> None:
    transport = httpx.ASGITransport(app=create_dashboard(e2e.app))
    ran = redis.asyncio.Redis.from_url(redis_url)
    with worker_pool() as workers:
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
            victim = WorkerProcess(redis_url, namespace, {}, []).start()
            workers.append(victim)
            jid = await e2e.sleepy.enqueue("held", 3.0)
            assert jid is not None
            await wait_until(lambda: _page_has(http, jid, "sleepy", f"{victim.pid}"),
                             timeout=20)

            victim.signal(signal.SIGKILL)
            # Its beats stop; its job is still on its in-progress list.
            await wait_until(lambda: _section_has(http, "Stopped beating", "awaiting recovery",
                                                  f":{victim.pid}:"), timeout=20)

            workers.append(WorkerProcess(redis_url, namespace, {}, []).start())
            await wait_until(lambda: _section_has(http, "Recent recoveries", f":{victim.pid}:"),
                             timeout=20)
            await wait_until(lambda: _ran(ran, namespace), timeout=20)
    await ran.aclose()


async def _section_has(http: httpx.AsyncClient, heading: str, *texts: str) -> bool:
    """Do ``texts`` appear between ``heading`` and the next heading of the Busy page?"""
    html = (await http.get("/busy")).text
    section = html.split(f"<h2>{heading}</h2>", 1)[1].split("<h2>", 1)[0]
    return all(text in section for text in texts)


async def _ran(client: redis.asyncio.Redis, namespace: str) -> bool:
    return await client.lrange(jobsapp.ran_key(namespace), 0, -1) == [b"held"]
