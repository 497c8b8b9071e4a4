"""Whatever is stored, every page renders: keys of another type, entries that are not
jobs, beats and events that are not what a worker writes, tokens no page wrote. A bad
entry is shown as it is, or left out, never a 500."""

from __future__ import annotations

import json

import httpx

from cogworker_async.redis.store import Store
from cogworker_async.web.security import CSRF_COOKIE
from tests.web.conftest import Board, rows


async def csrf(client: httpx.AsyncClient) -> str:
    """The CSRF token (the cookie a page sets), for a page that shows no form."""
    assert (await client.get("/")).status_code == 200
    return client.cookies[CSRF_COOKIE]


async def test_a_queue_key_of_another_type_reads_as_an_empty_queue(
        board: Board, client: httpx.AsyncClient, store: Store) -> None:
    await store.client.sadd(store.keys.queues, "odd")
    await store.client.set(store.keys.queue("odd"), "a string, not a list")
    assert (await client.get("/queues")).status_code == 200
    response = await client.get("/queues/odd")
    assert response.status_code == 200, response.text
    assert "This queue is empty" in response.text
    deleted = await client.post("/queues/odd/delete", data={
        "csrf_token": await csrf(client), "token": "0:0123456789abcdef"})
    assert deleted.status_code == 303
    assert "missing=1" in deleted.headers["location"]


async def test_busy_renders_beats_workers_and_events_that_are_not_what_a_worker_wrote(
        board: Board, client: httpx.AsyncClient, store: Store) -> None:
    keys = store.keys
    await store.client.hset(keys.beats, mapping={
        "w-1": "not json", "w-2": json.dumps({"hostname": 5, "pid": "x", "queues": "q"})})
    await store.client.hset(keys.last_beat, mapping={"w-1": "nan", "w-2": "inf"})
    await store.client.set(keys.process("w-2"), "1")
    await store.client.hset(keys.workers("w-2"), mapping={
        "j-1": "not json", "j-2": json.dumps({"class": 5, "queue": 7, "run_at": "x"})})
    await store.client.lpush(keys.recoveries, "not json", json.dumps([1]),
                             json.dumps({"at": "yesterday", "identity": "<i>w-0</i>"}),
                             json.dumps({"at": None, "requeued": {"a": 1}}))
    response = await client.get("/busy")
    assert response.status_code == 200, response.text
    assert "&lt;i&gt;w-0&lt;/i&gt;" in response.text
    assert "w-2" in response.text


async def test_a_token_no_page_wrote_is_a_404_or_a_400(board: Board,
                                                        client: httpx.AsyncClient) -> None:
    for token in ("nan:0123456789abcdef", "inf:0123456789abcdef"):
        assert (await client.get(f"/dead/job/{token}")).status_code == 404
    form_token = await csrf(client)
    for path, token in (("/dead/retry", "nan:0123456789abcdef"),
                        ("/queues/default/delete", f"{10**30}:0123456789abcdef")):
        response = await client.post(path, data={"csrf_token": form_token, "token": token})
        assert response.status_code == 400, response.text


async def test_entries_that_are_not_jobs_are_listed_and_shown(
        board: Board, client: httpx.AsyncClient, store: Store) -> None:
    await store.client.zadd(store.keys.dead("default"), {
        b"\xff\xfe not utf-8": 1.0, b"[1, 2]": 2.0, b'{"args": [NaN, Infinity]}': 3.0,
        b'{"class": 5, "args": {"a": 1}, "error_backtrace": [1, null]}': float("inf")})
    html = (await client.get("/dead")).text
    assert rows(html) == 4
    for record in (await board.inspector.dead.page()).items:
        response = await client.get(f"/dead/job/{record.token}")
        assert response.status_code == 200, (record.raw, response.text)


async def test_every_tab_renders_when_a_fixed_key_has_another_type(
        board: Board, client: httpx.AsyncClient, store: Store) -> None:
    # Every page's header counts the sets and lists the queues: one key of the wrong
    # type (a bug, a stray SET by hand) must not take the whole dashboard down.
    keys = store.keys
    await board.ok.enqueue_in(3600, "still-here")
    await store.client.set(keys.dead("default"), "a string, not a zset")
    await store.client.set(keys.queues, "a string, not a set")
    await store.client.set(keys.retry("default"), "a string, not a zset")
    await store.client.set(keys.batches, "a string, not a zset")
    for path in ("/", "/queues", "/busy", "/scheduled", "/retries", "/dead", "/batches",
                 "/periodic"):
        response = await client.get(path)
        assert response.status_code == 200, (path, response.text)
    assert "still-here" in (await client.get("/scheduled")).text
