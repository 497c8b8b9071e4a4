"""Every tab renders real data: jobs enqueued, failed by a real worker, running now."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from cogworker_async import App
from cogworker_async.redis.store import Store
from cogworker_async.web import create_dashboard
from tests.conftest import url_of_topology
from tests.waiting import wait_until
from tests.web.conftest import BASE_URL, HOUR, Board, rows

# The dashboard's pages and actions on one Redis and on a Redis Cluster (the sets of
# queues on different nodes read as one).
redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)

XSS = "<script>alert(1)</script>"


async def test_dashboard_shows_totals_server_and_queues(board: Board,
                                                        client: httpx.AsyncClient) -> None:
    await board.ok.enqueue("a")
    async with board.app.worker():
        await wait_until(lambda: board.ran == ["a"])
        await wait_until(lambda: _processed(board), timeout=10)
    await board.ok.enqueue("waiting")
    response = await client.get("/")
    assert response.status_code == 200
    html = response.text
    assert 'data-total="processed">1<' in html
    assert "redis" in html.lower()
    assert "Memory" in html
    assert 'href="/queues/default"' in html
    assert 'data-src="/stats.json"' in html
    stats = (await client.get("/stats.json")).json()
    assert stats["processed"] == 1
    assert stats["failed"] == 0
    assert stats["at"] > 0


async def _processed(board: Board) -> bool:
    return (await board.inspector.stats.totals()).processed == 1


async def test_queues_tab_lists_sizes_and_latency(board: Board,
                                                  client: httpx.AsyncClient) -> None:
    for tag in ("a", "b", "c"):
        await board.ok.enqueue(tag)
    html = (await client.get("/queues")).text
    assert re.search(r'href="/queues/default">default</a></td>\s*<td class="num">3<', html)
    page = (await client.get("/queues/default")).text
    assert rows(page) == 3
    assert "web.ok" in page
    assert "&#34;a&#34;" in page


async def test_a_thousand_job_queue_pages_by_25(board: Board, client: httpx.AsyncClient) -> None:
    await board.ok.enqueue_many([((f"job-{i}",), {}) for i in range(1000)])
    first = (await client.get("/queues/default")).text
    assert rows(first) == 25
    assert "page 1 of 40" in first
    assert "1,000 jobs" in first
    second = (await client.get("/queues/default?page=2")).text
    assert rows(second) == 25
    assert "page 2 of 40" in second
    # Position 0 runs next: the first job enqueued; page 2 starts at position 25.
    assert "job-0&#34;" in first
    assert "job-25&#34;" in second
    assert "job-25&#34;" not in first
    last = (await client.get("/queues/default?page=40")).text
    assert rows(last) == 25
    assert "job-999&#34;" in last
    beyond = (await client.get("/queues/default?page=41")).text
    assert rows(beyond) == 0
    assert "No jobs on page 41" in beyond


async def test_busy_tab_shows_the_process_and_its_running_job(board: Board,
                                                              client: httpx.AsyncClient) -> None:
    jid = await board.hold.enqueue("held")
    async with board.app.worker(concurrency=3) as manager:
        await wait_until(lambda: board.ran == ["held"])
        await wait_until(lambda: _busy_shows(client, jid or ""))
        html = (await client.get("/busy")).text
        assert manager.identity in html
        assert "web.hold" in html
        assert "Running for" in html  # the running jobs table's column
        assert "of 3" in html  # busy slots of its concurrency
        board.release.set()


async def _busy_shows(client: httpx.AsyncClient, jid: str) -> bool:
    return jid in (await client.get("/busy")).text


async def test_scheduled_tab(board: Board, client: httpx.AsyncClient) -> None:
    await board.ok.enqueue_in(HOUR, "later")
    html = (await client.get("/scheduled")).text
    assert rows(html) == 1
    assert "web.ok" in html
    assert "in 1 h" in html
    assert "Enqueue now" in html


async def test_retries_tab_and_job_page(board: Board, client: httpx.AsyncClient) -> None:
    await board.retries_from("flaky-1")
    html = (await client.get("/retries")).text
    assert rows(html) == 1
    assert "RuntimeError" in html
    assert "boom: flaky-1" in html
    link = re.search(r'href="(/retries/job/[^"]+)"', html)
    assert link is not None
    detail = (await client.get(link.group(1))).text
    assert "boom: flaky-1" in detail
    assert "Backtrace" in detail
    assert "in boom" in detail
    assert '<pre class="code">' in detail


async def test_dead_tab_and_job_page_show_the_error(board: Board,
                                                    client: httpx.AsyncClient) -> None:
    await board.dead_from("d-1")
    html = (await client.get("/dead")).text
    assert rows(html) == 1
    assert "RuntimeError" in html
    assert "boom: d-1" in html
    token = (await board.inspector.dead.page()).items[0].token
    detail = await client.get(f"/dead/job/{token}")
    assert detail.status_code == 200
    assert "Backtrace" in detail.text
    assert "boom" in detail.text


async def test_a_gone_entry_is_a_404_page(board: Board, client: httpx.AsyncClient) -> None:
    response = await client.get("/dead/job/123.0:0123456789abcdef")
    assert response.status_code == 404
    assert "no longer here" in response.text
    assert (await client.get("/dead/job/nonsense")).status_code == 404
    assert (await client.get("/queues/bad name!")).status_code == 404


async def test_periodic_tab(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.periodic("*/5 * * * *", name="web.tick")
    async def tick() -> None: ...

    transport = httpx.ASGITransport(app=create_dashboard(app))
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        html = (await http.get("/periodic")).text
    assert "web.tick" in html
    assert "*/5 * * * *" in html
    assert "never" in html
    assert re.search(r"in \d+ (s|min)", html)


async def test_search_finds_and_says_when_it_stopped_early(board: Board,
                                                           client: httpx.AsyncClient) -> None:
    await board.dead_from(*[f"many-{i}" for i in range(105)], "needle-xyz")
    found = (await client.get("/dead", params={"q": "NEEDLE"})).text
    assert rows(found) == 1
    assert "needle-xyz" in found
    assert "stopped early" not in found
    broad = (await client.get("/dead", params={"q": "many-"})).text
    assert rows(broad) == 100
    assert "stopped early" in broad
    none = (await client.get("/dead", params={"q": "absent-term"})).text
    assert rows(none) == 0
    assert "Nothing matches" in none


@pytest.mark.parametrize("where", ["queue", "dead", "dead_job", "search"])
async def test_job_arguments_and_errors_are_escaped(board: Board, client: httpx.AsyncClient,
                                                    where: str) -> None:
    if where == "queue":
        await board.ok.enqueue(XSS)
        html = (await client.get("/queues/default")).text
    else:
        await board.dead_from(XSS)
        token = (await board.inspector.dead.page()).items[0].token
        path = {"dead": "/dead", "dead_job": f"/dead/job/{token}", "search": "/dead"}[where]
        html = (await client.get(path, params={"q": "<script>"} if where == "search" else None)
                ).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert XSS not in html


async def test_the_dashboard_shows_the_per_day_history(
        board: Board, client: httpx.AsyncClient, store: Store) -> None:
    day = (datetime.now(UTC).date() - timedelta(days=5)).isoformat()
    await store.client.set(store.keys.stats_processed_on(day), 1234)
    await store.client.set(store.keys.stats_failed_on(day), 56)
    page = (await client.get("/")).text
    assert "History" in page
    assert f"<title>{day}: 1,234 processed, 56 failed</title>" in page
    assert page.count('<rect class="processed"') == 30
