"""Every action does what its button says, and the job really moves (checked in Redis
through the Inspector, and by the job running)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import url_of_topology
from tests.waiting import wait_until
from tests.web.conftest import HOUR, Board, page_token

# The dashboard's pages and actions on one Redis and on a Redis Cluster (the sets of
# queues on different nodes read as one).
redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)


async def post(client: httpx.AsyncClient, path: str, csrf: str, /,
               **fields: str | list[str]) -> httpx.Response:
    response = await client.post(path, data={"csrf_token": csrf, **fields})
    assert response.status_code == 303, response.text
    return response


async def test_retry_a_dead_job_and_it_runs(board: Board, client: httpx.AsyncClient) -> None:
    await board.dead_from("dead-1", "dead-2")
    board.ran.clear()
    page = await board.inspector.dead.page()
    chosen = page.items[0]
    response = await post(client, "/dead/retry", await page_token(client, "/dead"),
                          token=[chosen.token], page="1")
    assert response.headers["location"] == "/dead?page=1&did=retried&done=1"
    assert await board.inspector.dead.size() == 1
    assert (await board.inspector.queue("default").info()).size == 1
    shown = (await client.get(response.headers["location"])).text
    assert "Put back on its queue: 1 job." in shown
    async with board.app.worker():
        await wait_until(lambda: board.ran == [chosen.args[0]])


async def test_delete_and_delete_all_dead(board: Board, client: httpx.AsyncClient) -> None:
    await board.dead_from("a", "b", "c")
    token = await page_token(client, "/dead")
    first = (await board.inspector.dead.page()).items[0]
    await post(client, "/dead/delete", token, token=first.token)
    assert await board.inspector.dead.size() == 2
    assert await board.inspector.dead.find(first.token) is None
    response = await post(client, "/dead/delete", token, all="1")
    assert "done=2" in response.headers["location"]
    assert await board.inspector.dead.size() == 0


async def test_retry_all_dead(board: Board, client: httpx.AsyncClient) -> None:
    await board.dead_from("x", "y")
    await post(client, "/dead/retry", await page_token(client, "/dead"), all="1")
    assert await board.inspector.dead.size() == 0
    assert (await board.inspector.queue("default").info()).size == 2


async def test_kill_a_retry_and_kill_all(board: Board, client: httpx.AsyncClient) -> None:
    await board.retries_from("r-1", "r-2", "r-3")
    token = await page_token(client, "/retries")
    one = (await board.inspector.retries.page()).items[0]
    response = await post(client, "/retries/kill", token, token=one.token)
    assert "did=killed&done=1" in response.headers["location"]
    dead = (await board.inspector.dead.page()).items
    assert [d.jid for d in dead] == [one.jid]
    await post(client, "/retries/kill", token, all="1")
    assert await board.inspector.retries.size() == 0
    assert await board.inspector.dead.size() == 3


async def test_retry_now_runs_a_waiting_retry(board: Board, client: httpx.AsyncClient) -> None:
    await board.retries_from("again")
    board.ran.clear()
    entry = (await board.inspector.retries.page()).items[0]
    await post(client, "/retries/retry", await page_token(client, "/retries"),
               token=entry.token)
    async with board.app.worker():
        # It runs now (not in an hour), fails again and is filed for its next retry.
        await wait_until(lambda: board.ran == ["again"])
        await wait_until(lambda: _retry_count_is(board, entry.retry_count))


async def _retry_count_is(board: Board, count: int | None) -> bool:
    items = (await board.inspector.retries.page()).items
    # A manual retry does not use up an attempt: the count is where it was.
    return len(items) == 1 and items[0].retry_count == count


async def test_enqueue_a_scheduled_job_now_and_delete_one(board: Board,
                                                          client: httpx.AsyncClient) -> None:
    await board.ok.enqueue_in(HOUR, "soon")
    await board.ok.enqueue_in(HOUR * 2, "later")
    token = await page_token(client, "/scheduled")
    soon, later = (await board.inspector.scheduled.page()).items
    await post(client, "/scheduled/retry", token, token=soon.token)
    async with board.app.worker():
        await wait_until(lambda: board.ran == ["soon"])
    await post(client, "/scheduled/delete", token, token=later.token)
    assert await board.inspector.scheduled.size() == 0
    assert board.ran == ["soon"]


async def test_delete_one_queued_job_and_clear_a_queue(board: Board,
                                                       client: httpx.AsyncClient) -> None:
    for tag in ("q-1", "q-2", "q-3"):
        await board.ok.enqueue(tag)
    token = await page_token(client, "/queues/default")
    page = await board.inspector.queue("default").page()
    response = await post(client, "/queues/default/delete", token, token=page.items[1].token)
    assert response.headers["location"] == "/queues/default?did=deleted&done=1"
    left = await board.inspector.queue("default").page()
    assert [job.args[0] for job in left.items] == ["q-1", "q-3"]
    response = await post(client, "/queues/default/clear", token)
    assert response.headers["location"] == "/queues?did=cleared&done=2"
    assert await board.inspector.queues.names() == []


async def test_an_entry_gone_meanwhile_is_reported_missing(board: Board,
                                                           client: httpx.AsyncClient) -> None:
    await board.dead_from("gone")
    entry = (await board.inspector.dead.page()).items[0]
    token = await page_token(client, "/dead")
    await post(client, "/dead/delete", token, token=entry.token)
    response = await post(client, "/dead/retry", token, token=entry.token)
    assert "done=0&missing=1" in response.headers["location"]
    shown = (await client.get(response.headers["location"])).text
    assert "1 no longer there" in shown


async def test_nothing_selected_says_so(board: Board, client: httpx.AsyncClient) -> None:
    await board.dead_from("kept")
    response = await post(client, "/dead/delete", await page_token(client, "/dead"))
    assert response.headers["location"] == "/dead?none=1"
    assert "Nothing selected" in (await client.get("/dead?none=1")).text
    assert await board.inspector.dead.size() == 1


async def test_a_forged_token_value_is_a_400(board: Board, client: httpx.AsyncClient) -> None:
    await board.dead_from("kept")
    response = await client.post("/dead/delete", data={
        "csrf_token": await page_token(client, "/dead"), "token": "not-a-token"})
    assert response.status_code == 400
    assert await board.inspector.dead.size() == 1
