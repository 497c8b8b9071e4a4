"""The Limits tab and ``cogworker-async limits``: each limiter a worker registered, with
what it allows, how much is taken now and its recent refusals — the figures read from
Redis as the limiter scripts left them."""

from __future__ import annotations

import html
import json
import re
from contextlib import AsyncExitStack
from typing import Final

import anyio
import httpx
import pytest
from typer.testing import CliRunner

from cogworker_async import OverLimit
from cogworker_async.admin import Inspector
from tests.web.conftest import Board

pytestmark = pytest.mark.timeout(60)

TAG: Final = re.compile(r"<[^>]*>")


def text_of(page: httpx.Response) -> str:
    return " ".join(html.unescape(TAG.sub(" ", page.text)).split())


async def test_no_limiter_yet_says_how_they_appear(client: httpx.AsyncClient) -> None:
    page = await client.get("/limits")
    assert page.status_code == 200
    assert "No limiters yet" in text_of(page)


async def test_a_limiter_s_use_and_refusals_show(board: Board,
                                                 client: httpx.AsyncClient) -> None:
    payments = board.app.limiter("payments", concurrent=2)
    board.app.limiter("emails", per_window=(100, 60))
    async with board.app.worker():  # registers the App's limiters
        pass
    async with AsyncExitStack() as held:
        await held.enter_async_context(payments)  # outside a worker: a leased slot
        await held.enter_async_context(payments)
        with pytest.raises(OverLimit):
            async with payments:
                pass
        shown = text_of(await client.get("/limits"))
        assert re.search(r"payments concurrent 2 at once 2 / 2 full 1", shown), shown
        assert re.search(r"emails window 100 per 60 s 0 / 100 0", shown), shown
        usage = {u.name: u for u in await Inspector(board.app).limits.all()}
        assert (usage["payments"].in_use, usage["payments"].over_recent) == (2, 1)
    # Released: nothing in use any more.
    usage = {u.name: u for u in await Inspector(board.app).limits.all()}
    assert usage["payments"].in_use == 0


async def test_the_cli_lists_them_as_json(board: Board, redis_url: str, namespace: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.cli import adminapp
    board.app.limiter("search", bucket=(10, 1))
    async with board.app.worker():
        pass
    monkeypatch.setenv("COGWORKER_REDIS_URL", redis_url)
    monkeypatch.setenv(adminapp.NAMESPACE_ENV, namespace)
    from cogworker_async.cli import cli

    result = await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(cli, ["limits", adminapp.TARGET, "--json"]))
    assert result.exit_code == 0, result.output
    (search,) = json.loads(result.stdout)["limits"]
    assert (search["name"], search["kind"], search["capacity"], search["seconds"],
            search["in_use"]) == ("search", "bucket", 10, 1.0, 0)
    table = await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(cli, ["limits", adminapp.TARGET]))
    assert re.search(r"search\s+│ bucket\s+│ 10 per 1 s \(bucket\)", table.stdout), table.stdout
