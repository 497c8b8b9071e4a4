"""The dashboard marks a queue that holds jobs no live process serves — on the overview,
the Queues tab and the queue's page, with a tooltip saying why its jobs wait — and only
such a queue (issue 45, item 2)."""

from __future__ import annotations

import html

import httpx

from cogworker_async.admin.serving import UNSERVED_HINT
from tests.waiting import wait_until
from tests.web.conftest import Board

PAGES = ("/", "/queues", "/queues/default")
MARK = f'<strong class="unserved" title="{html.escape(UNSERVED_HINT)}" data-unserved>'


async def test_a_job_no_worker_serves_is_marked_on_every_page(
        board: Board, client: httpx.AsyncClient) -> None:
    await board.ok.enqueue("waits")
    for path in PAGES:
        response = await client.get(path)
        assert response.status_code == 200, path
        assert MARK in response.text, path


async def test_an_empty_queue_nobody_serves_is_not_marked(
        board: Board, client: httpx.AsyncClient) -> None:
    for path in PAGES:
        response = await client.get(path)
        assert response.status_code == 200, path
        assert "data-unserved" not in response.text, path


async def test_a_queue_a_live_worker_serves_is_not_marked_while_it_holds_jobs(
        board: Board, client: httpx.AsyncClient) -> None:
    for tag in ("runs", "waits"):
        await board.hold.enqueue(tag)
    async with board.app.worker(concurrency=1):
        try:
            await wait_until(lambda: _served_with_one_left(board))
            for path in PAGES:
                response = await client.get(path)
                assert "data-unserved" not in response.text, path
        finally:
            board.release.set()


async def _served_with_one_left(board: Board) -> bool:
    alive = any(p.alive for p in await board.inspector.processes.all())
    return alive and (await board.inspector.queue("default").info()).size == 1
