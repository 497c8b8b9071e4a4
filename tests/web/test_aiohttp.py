"""The README's aiohttp recipe, served for real: the dashboard behind aiohttp-asgi's
``ASGIResource`` on a TCP port, its pages and a POST action through a real HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from cogworker_async.web import create_dashboard
from tests.waiting import wait_until
from tests.web.conftest import Board, page_token

aiohttp_web = pytest.importorskip("aiohttp.web")
aiohttp_asgi = pytest.importorskip("aiohttp_asgi")


@pytest.fixture
async def served(board: Board) -> AsyncIterator[str]:
    """An aiohttp app with the dashboard at /jobs; yields its base URL."""
    app = aiohttp_web.Application()
    resource = aiohttp_asgi.ASGIResource(create_dashboard(board.app), root_path="/jobs")
    app.router.register_resource(resource)
    runner = aiohttp_web.AppRunner(app)
    await runner.setup()
    site = aiohttp_web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_the_dashboard_works_inside_aiohttp(board: Board, served: str) -> None:
    await board.dead_from("in-aiohttp")
    async with httpx.AsyncClient(base_url=served) as http:
        home = await http.get("/jobs/")
        assert home.status_code == 200
        assert 'href="/jobs/dead"' in home.text
        dead = await http.get("/jobs/dead")
        assert "in-aiohttp" in dead.text
        token = await page_token(http, "/jobs/dead")
        entry = (await board.inspector.dead.page()).items[0]
        moved = await http.post("/jobs/dead/retry", data={"csrf_token": token,
                                                          "token": entry.token})
        assert moved.status_code == 303
        assert moved.headers["location"].startswith("/jobs/dead?")
    assert await board.inspector.dead.size() == 0
    assert [q.size for q in await board.inspector.queues.infos()] == [1]


async def test_a_worker_runs_inside_aiohttps_cleanup_context(board: Board) -> None:
    """The README's recipe for a worker in an aiohttp app: ``cleanup_ctx``."""
    async def worker(_: object) -> AsyncIterator[None]:
        async with board.app.worker(concurrency=2):
            yield

    app = aiohttp_web.Application()
    app.cleanup_ctx.append(worker)
    runner = aiohttp_web.AppRunner(app)
    await runner.setup()
    try:
        await board.ok.enqueue("from-aiohttp")
        await wait_until(lambda: "from-aiohttp" in board.ran, timeout=10)
    finally:
        await runner.cleanup()
    assert await board.inspector.processes.all() == []  # stopped cleanly with the app
