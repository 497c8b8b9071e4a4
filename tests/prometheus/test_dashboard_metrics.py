"""The dashboard's ``/metrics``: the system-wide gauges for Prometheus, beside the pages
(and under the same protection), and ``cogworker_up 0`` while Redis is away."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

import httpx
import pytest

from cogworker_async import App
from cogworker_async.web import create_dashboard
from tests.cli import adminapp
from tests.prometheus.scraping import parse, value
from tests.servers import free_port

BASE_URL: Final = "http://dashboard.test"
CREDENTIALS: Final = ("admin", "s3cret-password")


@pytest.fixture
async def jobs(redis_url: str, namespace: str) -> AsyncIterator[adminapp.Jobs]:
    built = adminapp.build(namespace, redis_url)
    yield built
    await built.app.close()


async def get_metrics(app: App, *, protected: bool = False,
                      auth: tuple[str, str] | None = None) -> httpx.Response:
    """GET /metrics of a dashboard (with basic auth ``CREDENTIALS`` if ``protected``)."""
    dashboard = create_dashboard(app, basic_auth=CREDENTIALS if protected else None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=dashboard),
                                 base_url=BASE_URL, auth=auth) as http:
        return await http.get("/metrics")


async def test_the_dashboard_serves_the_system_gauges(jobs: adminapp.Jobs) -> None:
    for tag in ("a", "b"):
        await jobs.ok.enqueue(tag)
    response = await get_metrics(jobs.app)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert response.headers["cache-control"] == "no-store"
    samples = parse(response.text)
    assert value(samples, "cogworker_up") == 1
    assert value(samples, "cogworker_queue_size", queue="default") == 2
    assert value(samples, "cogworker_dead_size") == 0


async def test_it_is_behind_the_dashboards_auth(jobs: adminapp.Jobs) -> None:
    """It names queues and counts jobs: protected like the pages (Prometheus sends basic
    auth with ``basic_auth:`` in its scrape config)."""
    assert (await get_metrics(jobs.app, protected=True)).status_code == 401
    wrong = await get_metrics(jobs.app, protected=True, auth=("admin", "wrong"))
    assert wrong.status_code == 401
    right = await get_metrics(jobs.app, protected=True, auth=CREDENTIALS)
    assert right.status_code == 200
    assert value(parse(right.text), "cogworker_up") == 1


async def test_redis_away_is_up_0_not_an_error_page(namespace: str) -> None:
    app = App(f"redis://127.0.0.1:{free_port()}", namespace=namespace)  # nobody there
    try:
        response = await get_metrics(app)
    finally:
        await app.close()
    assert response.status_code == 200
    assert value(parse(response.text), "cogworker_up") == 0
