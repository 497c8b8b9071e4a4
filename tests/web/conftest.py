"""A dashboard over a real App on the session's private Redis, and its jobs.

Entries reach the retry and dead sets the real way: a worker runs jobs that raise.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest

from cogworker_async import App
from cogworker_async.admin import Inspector
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.web import create_dashboard
from tests.waiting import wait_until

HOUR = 3600.0
BASE_URL = "http://dashboard.test"
TOKEN_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Board:
    """An App with the jobs the web tests enqueue, and what they did."""

    app: App
    inspector: Inspector
    ok: JobFunction[[str], Any]
    boom: JobFunction[[str], Any]
    flaky: JobFunction[[str], Any]
    hold: JobFunction[[str], Any]
    ran: list[str] = field(default_factory=list)
    release: anyio.Event = field(default_factory=anyio.Event)

    async def dead_from(self, *tags: str) -> None:
        """Run ``boom`` for each tag until all are in dead (retry=False: straight there)."""
        before = await self.inspector.dead.size()
        for tag in tags:
            await self.boom.enqueue(tag)
        async with self.app.worker(concurrency=5):
            await wait_until(self._size_is(self.inspector.dead.size, before + len(tags)))

    async def retries_from(self, *tags: str) -> None:
        """Run ``flaky`` for each tag: it fails and waits an hour in retry."""
        before = await self.inspector.retries.size()
        for tag in tags:
            await self.flaky.enqueue(tag)
        async with self.app.worker(concurrency=5):
            await wait_until(self._size_is(self.inspector.retries.size, before + len(tags)))

    @staticmethod
    def _size_is(size: Callable[[], Any], wanted: int) -> Callable[[], Any]:
        async def check() -> bool:
            return bool(await size() == wanted)
        return check


def build_board(app: App) -> Board:
    board: Board

    async def ok(tag: str) -> None:
        board.ran.append(tag)

    async def boom(tag: str) -> None:
        board.ran.append(tag)
        raise RuntimeError(f"boom: {tag}")

    async def hold(tag: str) -> None:
        board.ran.append(tag)
        await board.release.wait()

    board = Board(
        app=app, inspector=Inspector(app),
        ok=app.job(name="web.ok")(ok),
        boom=app.job(name="web.boom", retry=False)(boom),
        # Fails on each run and waits an hour before the next: it stays in retry.
        flaky=app.job(name="web.flaky", retry=5, retry_in=lambda attempt, error: HOUR)(boom),
        hold=app.job(name="web.hold")(hold),
    )
    return board


@pytest.fixture
def board(make_app: Callable[..., App]) -> Board:
    return build_board(make_app())


@pytest.fixture
async def client(board: Board) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_dashboard(board.app))
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        yield http


async def page_token(client: httpx.AsyncClient, path: str) -> str:
    """GET a page (which sets the CSRF cookie) and return the token its forms carry."""
    response = await client.get(path)
    assert response.status_code == 200, response.text
    found = TOKEN_FIELD.search(response.text)
    assert found is not None, "the page has no form token"
    return found.group(1)


def rows(html: str) -> int:
    """Selectable entries on a page (one checkbox each)."""
    return html.count('name="token"')
