"""The dashboard and the admin model on a ``redis+sentinel://`` URL: they read the master
the sentinels name, before and after a failover (the failover tests cover workers and
enqueuers)."""

from __future__ import annotations

import httpx
import pytest

from cogworker_async import App, Inspector
from cogworker_async.web import create_dashboard
from tests.sentinel_harness import SentinelTopology

pytestmark = pytest.mark.timeout(90)


async def test_the_dashboard_and_the_admin_model_follow_a_failover(
    topology: SentinelTopology, namespace: str,
) -> None:
    jobs = App(topology.url, namespace=namespace, queues=["mail"])

    @jobs.job(queue="mail")
    async def send(to: str) -> None:
        pass

    inspector = Inspector(jobs)
    board = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_dashboard(jobs)),
                              base_url="http://board")
    try:
        await send.enqueue("a@example.com")
        assert (await inspector.queue("mail").info()).size == 1
        page = await board.get("/queues")
        assert page.status_code == 200
        assert "mail" in page.text

        old, new = topology.failover()
        topology.wait_demoted(old)  # what the old master held is now the new one's
        await send.enqueue("b@example.com")  # written where the sentinels now say
        assert (await inspector.queue("mail").info()).size == 2
        page = await board.get("/queues")
        assert page.status_code == 200
        assert "mail" in page.text
        with topology.client(new) as on_new:
            assert on_new.llen(f"{namespace}:{{mail}}:queue") == 2
    finally:
        await board.aclose()
        await jobs.close()
