"""The Batches tab and a batch's page: open and ended batches with their counts, a
batch's members, callbacks and links, its Cancel button (CSRF-guarded; its waiting
members really are cancelled), a job's page linking to its batch, an unknown bid, and
hostile text escaped. Batches made the real way (``async with jobs.batch(...)``) on a
real Redis; members scheduled an hour ahead stay waiting without a worker."""

from __future__ import annotations

import html
import re
import time
from typing import Final
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI

from cogworker_async.redis.store import Store
from cogworker_async.web import create_dashboard
from cogworker_async.web.security import CSRF_COOKIE
from tests.conftest import url_of_topology
from tests.waiting import wait_until
from tests.web.conftest import BASE_URL, HOUR, Board, page_token

pytestmark = pytest.mark.timeout(60)

# On one Redis and on a Redis Cluster (a batch's keys in the namespace's slot, its
# members' records in their queues').
redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)

XSS: Final = "<script>alert(1)</script>"
ESCAPED: Final = "&lt;script&gt;alert(1)&lt;/script&gt;"
TAG: Final = re.compile(r"<[^>]*>")


def text_of(page: httpx.Response | str) -> str:
    """The page as a person reads it: no tags, entities decoded, spaces collapsed."""
    body = page if isinstance(page, str) else page.text
    return " ".join(html.unescape(TAG.sub(" ", body)).split())


def row_of(page: str, bid: str) -> str:
    """The text of the first table row of batch ``bid``."""
    found = re.search(rf'<tr data-bid="{re.escape(bid)}">(.*?)</tr>', page, re.S)
    assert found is not None, f"no row for batch {bid}"
    return text_of(found.group(1))


def sections(page: str) -> tuple[str, str]:
    """The tab's two lists: the open batches, and every batch."""
    open_part, _, all_part = page.partition('<h2 id="all">')
    return open_part, all_part


async def waiting_batch(board: Board, description: str, *tags: str) -> tuple[str, list[str]]:
    """A batch of members scheduled an hour ahead (they wait: no worker runs them)."""
    async with board.app.batch(description) as batch:
        jids = [await board.ok.enqueue_in(HOUR, tag) for tag in tags]
    assert all(jids)
    return batch.bid, [jid for jid in jids if jid is not None]


async def ended_batch(board: Board, description: str) -> str:
    """A batch with no member: it ends (success) as its block exits."""
    async with board.app.batch(description) as batch:
        pass
    return batch.bid


async def test_the_tab_lists_an_open_and_an_ended_batch_with_their_counts(
        board: Board, client: httpx.AsyncClient) -> None:
    ended = await ended_batch(board, "nothing to do")
    running, _ = await waiting_batch(board, "nightly import", "row-1", "row-2")
    assert (await board.app.batch_status(ended)).state == "success"

    response = await client.get("/batches")
    assert response.status_code == 200
    open_part, all_part = sections(response.text)
    # bid, description, state, total, pending, succeeded, dead, cancelled, created
    assert row_of(open_part, running).startswith(f"{running} nightly import running 2 2 0 0 0 ")
    assert ended not in open_part
    assert "1 batch not ended" in text_of(open_part)
    assert row_of(all_part, ended).startswith(f"{ended} nothing to do success 0 0 0 0 0 ")
    assert row_of(all_part, running).startswith(f"{running} nightly import running 2 2")
    assert all_part.index(running) < all_part.index(ended)  # newest first
    assert "2 batches" in text_of(all_part)
    assert f'href="/batches/{running}"' in open_part


async def test_the_tab_pages_by_25_and_reads_no_more(board: Board,
                                                     client: httpx.AsyncClient) -> None:
    bids = [await ended_batch(board, f"batch {i}") for i in range(30)]
    first = (await client.get("/batches")).text
    _, every = sections(first)
    assert every.count("<tr data-bid=") == 25
    assert "page 1 of 2" in every
    assert 'href="/batches?open=1&amp;page=2"' in every  # the other list's page is kept
    assert bids[-1] in every  # newest first
    assert bids[4] not in every
    second = sections((await client.get("/batches?page=2")).text)[1]
    assert second.count("<tr data-bid=") == 5
    assert bids[0] in second
    assert "No open batches on page 3" in (await client.get("/batches?open=3")).text
    page = await board.inspector.batches.page("all", 2)
    assert [row.bid for row in page.items] == bids[4::-1]


async def test_the_batch_page_shows_its_members_and_counts(board: Board,
                                                           client: httpx.AsyncClient) -> None:
    bid, jids = await waiting_batch(board, "three rows", "r-1", "r-2", "r-3")
    response = await client.get(f"/batches/{bid}")
    assert response.status_code == 200
    page = response.text
    shown = text_of(page)
    assert f"Batches / {bid} running" in shown
    assert "three rows" in shown
    assert "3: 3 pending, 0 succeeded, 0 dead, 0 cancelled" in shown
    pending = re.search(r'data-members="pending">(.*?)</ul>', page, re.S)
    assert pending is not None
    assert re.findall(r'href="/jobs/([^"]+)"', pending.group(1)) == sorted(jids)
    assert "Succeeded 0 jobs None." in shown
    assert "Callbacks none due yet" in shown
    assert 'class="danger">Cancel</button>' in page


async def test_the_page_shows_a_sample_of_a_large_set(board: Board, store: Store,
                                                      client: httpx.AsyncClient) -> None:
    bid, _ = await waiting_batch(board, "grown by hand", "real")
    await store.client.sadd(store.keys.batch_set(bid, "pending"),
                            *[f"jid-{i:04}" for i in range(1000)])
    page = (await client.get(f"/batches/{bid}")).text
    pending = re.search(r'data-members="pending">(.*?)</ul>', page, re.S)
    assert pending is not None
    assert pending.group(1).count("<li ") == 50
    assert "1,001 jobs, 50 shown" in text_of(page)


async def test_a_finished_batch_shows_its_callbacks_and_its_members_link_to_it(
        board: Board, client: httpx.AsyncClient) -> None:
    async with board.app.batch("runs now", on_success=board.ok.s("all done")) as batch:
        first = await board.ok.enqueue("m-1")
        second = await board.ok.enqueue("m-2")
    async with board.app.worker():
        await wait_until(lambda: "all done" in board.ran, timeout=30)
        await wait_until(lambda: _state_is(board, batch.bid, "success"), timeout=30)
    page = (await client.get(f"/batches/{batch.bid}")).text
    shown = text_of(page)
    assert f"Batches / {batch.bid} success" in shown
    assert "2: 0 pending, 2 succeeded" in shown
    callback = f"{batch.bid}-success"
    assert f'href="/jobs/{callback}" data-callback="success"' in page
    assert 'class="danger">Cancel</button>' not in page  # ended: nothing to cancel
    succeeded = re.search(r'data-members="succeeded">(.*?)</ul>', page, re.S)
    assert succeeded is not None
    assert sorted(re.findall(r'href="/jobs/([^"]+)"', succeeded.group(1))) == sorted(
        [first, second])
    # A member's page links to its batch after it ended too: its record names it.
    member = (await client.get(f"/jobs/{first}")).text
    assert f'href="/batches/{batch.bid}" data-batch' in member
    assert f"Batch {batch.bid}" in text_of(member)


async def _state_is(board: Board, bid: str, state: str) -> bool:
    return (await board.app.batch_status(bid)).state == state


async def test_a_waiting_member_and_a_queued_callback_link_to_their_batch(
        board: Board, client: httpx.AsyncClient, store: Store) -> None:
    bid, jids = await waiting_batch(board, "linked", "w-1")
    member = (await client.get(f"/jobs/{jids[0]}")).text
    assert f'href="/batches/{bid}" data-batch' in member
    # A callback's record names no batch: its payload does (queued here by hand, as the
    # relay enqueues one).
    jid = await board.ok.options(jid=f"{bid}-complete").enqueue("report")
    assert jid is not None
    raw = await store.client.lindex(store.keys.queue("default"), 0)
    patched = raw.replace(b'"class"', b'"bid":"' + bid.encode()
                          + b'","batch_callback":"complete","class"', 1)
    await store.client.lset(store.keys.queue("default"), 0, patched)
    callback = (await client.get(f"/jobs/{jid}")).text
    assert f'href="/batches/{bid}" data-batch' in callback
    assert f"Callback of {bid} (its complete callback)" in text_of(callback)
    plain = await board.ok.enqueue("no batch")
    assert "data-batch" not in (await client.get(f"/jobs/{plain}")).text


async def test_cancel_with_the_token_cancels_the_waiting_members(
        board: Board, client: httpx.AsyncClient) -> None:
    bid, jids = await waiting_batch(board, "to cancel", "c-1", "c-2")
    token = await page_token(client, f"/batches/{bid}")
    response = await client.post(f"/batches/{bid}/cancel", data={"csrf_token": token})
    assert response.status_code == 303, response.text
    assert response.headers["location"] == f"/batches/{bid}?did=cancelled&done=2"
    for jid in jids:
        assert (await board.app.status(jid)).state == "cancelled"
    shown = text_of(await client.get(response.headers["location"]))
    assert "Cancelled or, if running, asked to stop: 2 jobs." in shown


async def test_an_abandoned_batch_is_listed_as_ended_with_no_cancel(
        board: Board, client: httpx.AsyncClient) -> None:
    opened: list[str] = []
    with pytest.raises(RuntimeError, match="the block failed"):
        await _fail_inside_a_batch(board, opened)
    bid, = opened
    assert (await board.app.batch_status(bid)).state == "abandoned"
    open_part, all_part = sections((await client.get("/batches")).text)
    assert bid not in open_part
    assert row_of(all_part, bid).startswith(f"{bid} half made abandoned 1 ")
    page = (await client.get(f"/batches/{bid}")).text
    assert f"Batches / {bid} abandoned" in text_of(page)
    assert 'class="danger">Cancel</button>' not in page


async def _fail_inside_a_batch(board: Board, opened: list[str]) -> None:
    async with board.app.batch("half made") as batch:
        opened.append(batch.bid)
        await board.ok.enqueue_in(HOUR, "a-1")
        raise RuntimeError("the block failed")


async def test_cancel_without_the_token_or_by_get_is_refused(
        board: Board, client: httpx.AsyncClient) -> None:
    bid, jids = await waiting_batch(board, "kept", "k-1")
    await client.get(f"/batches/{bid}")  # the cookie, without the form's token
    refused = await client.post(f"/batches/{bid}/cancel", data={})
    assert refused.status_code == 403
    assert "CSRF token" in refused.text
    # A GET is the page of a batch named "<bid>/cancel" (a bid may hold "/"): none.
    assert (await client.get(f"/batches/{bid}/cancel")).status_code == 404
    assert (await board.app.status(jids[0])).state == "scheduled"


async def test_an_unknown_bid_says_so(board: Board, client: httpx.AsyncClient) -> None:
    unknown = await client.get("/batches/no-such-batch")
    assert unknown.status_code == 404
    assert "Unknown: no batch with this bid is kept" in text_of(unknown)
    not_a_bid = await client.get("/batches/" + quote('say "hi"', safe=""))
    assert not_a_bid.status_code == 400
    assert "This is not a bid" in text_of(not_a_bid)
    token = client.cookies[CSRF_COOKIE]  # set by the pages above (this one has no form)
    cancelled = await client.post("/batches/no-such-batch/cancel", data={"csrf_token": token})
    assert cancelled.status_code == 404
    assert (await client.get("/batches/")).headers.get("location") == "/batches"


async def test_a_hostile_description_and_bid_are_escaped(
        board: Board, client: httpx.AsyncClient, store: Store) -> None:
    async with board.app.batch(XSS) as batch:
        await board.ok.enqueue_in(HOUR, "member")
    # A bid is any text a jid may be (``<`` and ``/`` included): one stored as the
    # batch scripts store it, with a hostile description too.
    now = time.time()
    await store.client.hset(store.keys.batch(XSS), mapping={
        "state": "running", "sealed": "1", "created_at": now, "description": XSS,
        "total": 0, "callbacks": "{}", "parent": batch.bid})
    await store.client.zadd(store.keys.batches, {XSS: now})
    tab = (await client.get("/batches")).text
    pages = [await client.get(f"/batches/{batch.bid}"),
             await client.get("/batches/" + quote(XSS, safe=""))]
    assert [page.status_code for page in pages] == [200, 200]
    for shown in (tab, *(page.text for page in pages)):
        assert ESCAPED in shown
        assert XSS not in shown
    assert f'href="/batches/{quote(XSS, safe="")}"' in tab
    assert f'href="/batches/{batch.bid}" data-parent' in pages[1].text


async def test_batches_that_are_not_what_the_scripts_write_are_shown_not_a_500(
        board: Board, client: httpx.AsyncClient, store: Store) -> None:
    bid, _ = await waiting_batch(board, "damaged later", "d-1")
    await store.client.hset(store.keys.batch(bid), mapping={"total": "many",
                                                            "callbacks": "[1"})
    await store.client.zadd(store.keys.batches, {'not "a" bid': 1.0, "gone": 2.0})
    tab = await client.get("/batches")
    assert tab.status_code == 200, tab.text
    assert "unreadable" in row_of(tab.text, bid)
    assert "expired" in row_of(tab.text, "gone")
    page = await client.get(f"/batches/{bid}")
    assert page.status_code == 404
    assert "record cannot be read" in text_of(page)
    await store.client.delete(store.keys.batches_open)
    await store.client.set(store.keys.batches_open, "a string, not a zset")
    assert (await client.get("/batches")).status_code == 200


async def test_mounted_under_a_prefix_its_links_and_redirect_stay_under_it(
        board: Board) -> None:
    bid, _ = await waiting_batch(board, "mounted", "m-1")
    api = FastAPI()
    api.mount("/jobs", create_dashboard(board.app))
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        assert f'href="/jobs/batches/{bid}"' in (await http.get("/jobs/batches")).text
        token = await page_token(http, f"/jobs/batches/{bid}")
        response = await http.post(f"/jobs/batches/{bid}/cancel", data={"csrf_token": token})
    assert response.headers["location"] == f"/jobs/batches/{bid}?did=cancelled&done=1"
