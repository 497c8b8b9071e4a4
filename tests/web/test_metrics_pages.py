"""The Metrics tab and a job class's page, over runs a real worker recorded: the table's
numbers, the charts, links that survive any job name, empty windows, refused windows."""

from __future__ import annotations

import html
import re
from typing import Final
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from markupsafe import escape

from cogworker_async.admin import Inspector
from cogworker_async.web import create_dashboard
from tests.waiting import wait_until
from tests.web.conftest import BASE_URL, Board

ODD: Final = '<b>odd</b> "job"/with?query=1&and #hash|pipe 100% ü'
"""A job name that needs escaping in HTML and encoding in a URL (a slash, a pipe: the
run metrics' field separator)."""
FLUSHED: Final = 15.0


async def _recorded(insp: Inspector, wanted: dict[str, int]) -> bool:
    summary = await insp.metrics.summary()
    return {row.name: row.runs for row in summary.jobs} == wanted


@pytest.fixture
async def ran(board: Board) -> Board:
    """3 runs of ``web.ok``, 2 of ``web.boom`` (failed, to dead), 1 of the odd name,
    flushed to the run metrics."""

    @board.app.job(name=ODD)
    async def odd() -> None:
        pass

    for tag in ("a", "b", "c"):
        await board.ok.enqueue(tag)
    for tag in ("x", "y"):
        await board.boom.enqueue(tag)
    await odd.enqueue()
    wanted = {"web.ok": 3, "web.boom": 2, ODD: 1}
    async with board.app.worker(concurrency=5):
        await wait_until(lambda: _recorded(board.inspector, wanted), timeout=FLUSHED,
                         every=0.1)
    return board


def _row(page: str, name: str) -> list[str]:
    """The cells of the table row whose job link says ``name``."""
    escaped = re.escape(str(escape(name)))
    found = re.search(rf">{escaped}</a></td>(.*?)</tr>", page, re.S)
    assert found is not None, f"no row for {name!r}"
    return re.findall(r'<td class="num[^"]*">([^<]*)</td>', found.group(1))


async def test_the_tab_lists_each_job_class_with_runs_failures_and_times(
    ran: Board, client: httpx.AsyncClient,
) -> None:
    response = await client.get("/metrics/jobs")
    assert response.status_code == 200
    page = response.text
    assert '<a href="/metrics/jobs" class="active"' in page  # the nav's Metrics tab
    runs, failed, total, mean, p50, p95 = _row(page, "web.ok")
    assert (runs, failed) == ("3", "0")
    assert all(value.endswith(("ms", "s")) for value in (total, mean, p50, p95))
    assert _row(page, "web.boom")[:2] == ["2", "2"]
    assert _row(page, ODD)[:2] == ["1", "0"]
    # The name is text, never markup; its link is one path segment, whatever it holds.
    assert "<b>odd</b>" not in page
    assert f'href="/metrics/jobs/{quote(ODD, safe="")}?window=60"' in page
    # The chart: a line per job class (three here), with a legend naming each.
    assert page.count("<polyline points=") >= 3
    assert 'class="key s0"' in page
    assert "top of the chart: " in page
    assert "/min" in page
    timed = (await client.get("/metrics/jobs?by=time&window=120")).text
    assert "Run time <small>per minute" in timed
    assert 'href="/metrics/jobs?window=480&amp;by=time"' in timed  # the choice is kept


async def test_a_job_class_page_shows_its_heat_map_series_and_minutes(
    ran: Board, client: httpx.AsyncClient,
) -> None:
    listing = (await client.get("/metrics/jobs")).text
    link = re.search(r'href="(/metrics/jobs/%3Cb%3Eodd[^"]+)"', listing)
    assert link is not None
    response = await client.get(html.unescape(link.group(1)))
    assert response.status_code == 200
    page = response.text
    assert f"data-job-name>{escape(ODD)}</span>" in page
    assert "<b>odd</b>" not in page
    assert page.count("<rect ") == 1  # one minute, one bucket: the one run
    assert "1 run ≤ " in page
    assert '<ol class="heat-labels"' in page

    boom = (await client.get("/metrics/jobs/web.boom?window=240")).text
    assert re.search(r"<dt>Runs</dt><dd>2</dd>\s*<dt>Failed</dt><dd>2</dd>", boom)
    assert boom.count('<g class="failed">') == 1
    assert 'aria-current="true">4 h</a>' in boom
    minutes = re.findall(r'<time class="when"', boom.split('class="compact minutes"')[1])
    assert 1 <= len(minutes) <= 2  # the minute(s) the two runs ended in


async def test_empty_windows_say_so(board: Board, client: httpx.AsyncClient) -> None:
    tab = await client.get("/metrics/jobs?window=480")
    assert tab.status_code == 200
    assert "No runs in the last 8 h" in tab.text
    assert "<polyline" not in tab.text
    job = await client.get("/metrics/jobs/web.ok")
    assert job.status_code == 200
    assert "No runs of web.ok in the last 1 h" in job.text
    odd = await client.get("/metrics/jobs/" + quote(ODD, safe=""))
    assert odd.status_code == 200
    assert f"No runs of {escape(ODD)}" in odd.text


@pytest.mark.parametrize("window", ["0", "481", "abc", "1.5", "-60", "9" * 5000])
async def test_a_window_that_is_not_one_is_refused(board: Board, client: httpx.AsyncClient,
                                                   window: str) -> None:
    for path in ("/metrics/jobs", "/metrics/jobs/web.ok"):
        response = await client.get(path, params={"window": window})
        assert response.status_code == 400
        assert "is not a window" in response.text
        assert 'href="/metrics/jobs?window=60"' in response.text  # the valid choices


async def test_mounted_under_a_prefix_every_metrics_link_stays_under_it(ran: Board) -> None:
    api = FastAPI()
    api.mount("/jobs", create_dashboard(ran.app))
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        tab = (await http.get("/jobs/metrics/jobs")).text
        found = set(re.findall(r'href="(/[^"]*)"', tab))
        assert f"/jobs/metrics/jobs/{quote(ODD, safe='')}?window=60" in found
        for link in found:
            assert link.startswith("/jobs/"), link
            response = await http.get(html.unescape(link))
            assert response.status_code == 200, link
        odd = await http.get(f"/jobs/metrics/jobs/{quote(ODD, safe='')}")
        assert f"data-job-name>{escape(ODD)}</span>" in odd.text
        assert 'href="/jobs/metrics/jobs?window=60">Metrics</a>' in odd.text
