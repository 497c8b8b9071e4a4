"""The Queues tab's Pause / Resume buttons: CSRF-guarded, the state shown on the tab and
the queue's page, and a worker that really takes nothing from a paused queue."""

from __future__ import annotations

import html
import re
from typing import Final

import anyio
import httpx
import pytest

from tests.waiting import wait_until
from tests.web.conftest import Board, page_token

pytestmark = pytest.mark.timeout(60)

TAG: Final = re.compile(r"<[^>]*>")


def text_of(page: httpx.Response) -> str:
    return " ".join(html.unescape(TAG.sub(" ", page.text)).split())


async def test_pause_needs_the_csrf_token(board: Board, client: httpx.AsyncClient) -> None:
    await board.ok.enqueue("kept")
    await client.get("/queues")  # the cookie, without the form's token
    refused = await client.post("/queues/default/pause", data={})
    assert refused.status_code == 403
    assert await board.app.paused() == {}


async def test_pause_from_the_tab_holds_the_queue_and_resume_from_its_page_frees_it(
    board: Board, client: httpx.AsyncClient,
) -> None:
    await board.ok.enqueue("held")
    token = await page_token(client, "/queues")
    paused = await client.post("/queues/default/pause", data={"csrf_token": token})
    assert paused.status_code == 303
    assert paused.headers["location"] == "/queues?pause=paused"
    shown = text_of(await client.get(paused.headers["location"]))
    assert "Paused: no worker starts a job from this queue" in shown
    assert re.search(r"default 1 .{1,12} paused now Resume", shown), shown
    again = await client.post("/queues/default/pause", data={"csrf_token": token})
    assert again.headers["location"] == "/queues?pause=was-paused"

    async with board.app.worker():
        with anyio.move_on_after(2.0):  # twice the promised bound: nothing may start
            await wait_until(lambda: bool(board.ran), timeout=30)
        assert board.ran == []
        page = text_of(await client.get("/queues/default"))
        assert "paused" in page
        token = await page_token(client, "/queues/default")
        resumed = await client.post("/queues/default/resume",
                                    data={"csrf_token": token, "back": "queue"})
        assert resumed.headers["location"] == "/queues/default?pause=resumed"
        await wait_until(lambda: board.ran == ["held"], timeout=30)
    assert "paused" not in text_of(await client.get("/queues")).replace("Paused", "")
