"""The Batches tab with a batch whose keys a co-tenant damaged (issue 40, defect 2): the
tab answers (200), the damaged row says it is unreadable, the healthy rows are shown, and
the damaged batch's own page says so (404), never a 503."""

from __future__ import annotations

import httpx
import pytest

from tests.web.conftest import Board

pytestmark = pytest.mark.timeout(60)

DEEP = "[" * 100_000 + "]" * 100_000


async def test_the_tab_shows_a_damaged_batch_as_unreadable(board: Board,
                                                          client: httpx.AsyncClient) -> None:
    async with board.app.batch("fine") as healthy:
        pass
    damaged = []
    for how in ("deep", "wrong type", "not a number"):
        async with board.app.batch(how) as batch:
            pass
        damaged.append(batch.bid)
    store = board.app._store()
    await store.client.hset(store.keys.batch(damaged[0]), "callbacks", DEEP)
    await store.client.delete(store.keys.batch_set(damaged[1], "kids"))
    await store.client.set(store.keys.batch_set(damaged[1], "kids"), "x")
    await store.client.hset(store.keys.batch(damaged[2]), "total", "many")

    response = await client.get("/batches")

    assert response.status_code == 200, response.text
    assert f'href="/batches/{healthy.bid}"' in response.text
    assert response.text.count("unreadable: its record is not what a batch's is") == 3
    for bid in damaged:
        page = await client.get(f"/batches/{bid}")
        assert page.status_code == 404
        assert "cannot be read" in page.text
