"""Mounted under a prefix in a FastAPI app, every link, form and redirect stays under
it; two dashboards in one process keep apart."""

from __future__ import annotations

import re

import httpx
from fastapi import FastAPI

from cogworker_async import App
from cogworker_async.web import create_dashboard
from tests.web.conftest import BASE_URL, Board, build_board, page_token

TABS = ["/", "/queues", "/busy", "/scheduled", "/retries", "/dead", "/batches", "/periodic"]


def links(html: str) -> set[str]:
    return set(re.findall(r'(?:href|src|action|formaction|data-src)="([^"]+)"', html))


async def test_mounted_under_jobs_in_fastapi(board: Board) -> None:
    await board.dead_from("mounted")
    await board.ok.enqueue("queued")
    api = FastAPI()
    api.mount("/jobs", create_dashboard(board.app))
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        home = await http.get("/jobs/")
        assert home.status_code == 200
        cookie = home.headers["set-cookie"].lower()
        assert cookie.startswith("cogworker_csrf_")  # its own name: not the root mount's
        assert "path=/jobs" in cookie
        found = links(home.text)
        assert {f"/jobs{tab}" for tab in TABS} <= found | {"/jobs/"}
        for link in found | links((await http.get("/jobs/dead")).text):
            if not link.startswith("/jobs/"):
                raise AssertionError(f"a link escapes the mount: {link}")
            if link.endswith(("/retry", "/delete", "/kill", "/clear")):
                continue  # POST only
            assert (await http.get(link)).status_code == 200, link
        token = await page_token(http, "/jobs/dead")
        entry = (await board.inspector.dead.page()).items[0]
        moved = await http.post("/jobs/dead/retry",
                                data={"csrf_token": token, "token": entry.token})
        assert moved.status_code == 303
        assert moved.headers["location"] == "/jobs/dead?did=retried&done=1"
        assert "Put back on its queue: 1 job." in (await http.get(moved.headers["location"])).text
    assert await board.inspector.dead.size() == 0


async def test_two_dashboards_in_one_process_keep_apart(redis_url: str, board: Board) -> None:
    other = build_board(App(redis_url, namespace=f"{board.app.settings.namespace}-other"))
    try:
        await _two_dashboards(board, other)
    finally:
        await other.app.close()


async def _two_dashboards(board: Board, other: Board) -> None:
    await board.ok.enqueue_in(3600, "first-only")
    await other.ok.enqueue_in(3600, "second-only")
    api = FastAPI()
    api.mount("/a", create_dashboard(board.app, title="First"))
    api.mount("/b", create_dashboard(other.app, title="Second"))
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        first = (await http.get("/a/scheduled")).text
        second = (await http.get("/b/scheduled")).text
    assert "first-only" in first
    assert "second-only" not in first
    assert "· First" in first
    assert "second-only" in second
    assert "first-only" not in second
    assert "· Second" in second
    assert all(link.startswith("/b/") for link in links(second))
