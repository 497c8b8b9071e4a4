"""The job page (``/jobs/{jid}``): what became of one job — queued, running with its
progress, succeeded with its result, dead with its error, unknown — its Cancel button
(CSRF-guarded, and the job really does not run), the header's jid search, and the Busy
tab's progress of running jobs. Real workers, real Redis."""

from __future__ import annotations

import html
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpx
import markupsafe
import pytest

from cogworker_async import current_job
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.web import format
from tests.conftest import url_of_topology
from tests.waiting import wait_until
from tests.web.conftest import Board, page_token

pytestmark = pytest.mark.timeout(60)

# On one Redis and on a Redis Cluster: a jid is looked for in every queue's slot, and
# Busy reads the records of running jobs of several slots in one pipeline.
redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)

KEEP_RESULT: Final = 60.0
PROGRESS_SHOWN: Final = 5.0
"""Seconds for a reported progress to reach the record (written every 0.5 s)."""


@dataclass
class Extra:
    """Jobs of these tests, registered on the board's App."""

    answer: JobFunction[[str], Awaitable[dict[str, Any]]]
    working: JobFunction[[str], Awaitable[None]]
    go_on: anyio.Event


@pytest.fixture
def extra(board: Board) -> Extra:
    go_on = anyio.Event()

    async def answer(tag: str) -> dict[str, Any]:
        return {"answer": 42, "tag": tag}

    async def working(step: str) -> None:
        await current_job().set_progress(0.4, {"step": step})
        await go_on.wait()
        board.ran.append(step)

    return Extra(
        answer=board.app.job(name="web.answer", keep_result=KEEP_RESULT)(answer),
        working=board.app.job(name="web.working")(working),
        go_on=go_on,
    )


TAG: Final = re.compile(r"<[^>]*>")


def text_of(page: httpx.Response) -> str:
    """The page as a person reads it: no tags, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(TAG.sub(" ", page.text)).split())


async def page_shows(client: httpx.AsyncClient, path: str, *texts: str) -> bool:
    shown = text_of(await client.get(path))
    return all(text in shown for text in texts)


def state_is(board: Board, jid: str, state: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await board.app.status(jid)).state == state
    return check


async def test_a_queued_job_says_so_and_offers_cancel(board: Board,
                                                      client: httpx.AsyncClient) -> None:
    jid = await board.ok.enqueue("waiting")
    assert jid is not None
    page = await client.get(f"/jobs/{jid}")
    assert page.status_code == 200
    shown = text_of(page)
    assert f"Job {jid} queued" in shown
    assert "web.ok" in shown
    assert 'href="/queues/default"' in page.text
    assert f'action="/jobs/{jid}/cancel"' in page.text
    assert ">Cancel</button>" in page.text


async def test_a_running_job_shows_its_progress_here_and_on_busy(
        board: Board, extra: Extra, client: httpx.AsyncClient) -> None:
    jid = await extra.working.enqueue("copying <files>")
    assert jid is not None
    async with board.app.worker():
        await wait_until(lambda: page_shows(client, f"/jobs/{jid}", "running", "40%",
                                            '"step": "copying <files>"'),
                         timeout=PROGRESS_SHOWN)
        page = await client.get(f"/jobs/{jid}")
        assert '<progress value="0.4" max="1">' in page.text
        assert "<files>" not in page.text  # the info is escaped, never markup
        process = (await board.app.status(jid)).process
        assert process is not None
        assert process in page.text

        busy = await client.get("/busy")
        row = busy.text.split(f'href="/jobs/{jid}"', 1)[1].split("</tr>", 1)[0]
        assert '<progress value="0.4" max="1">' in row
        assert "40%" in row
        assert "&lt;files&gt;" in row  # escaped
        assert '{"step": "copying <files>"}' in html.unescape(row)

        extra.go_on.set()
        await wait_until(state_is(board, jid, "succeeded"))
    shown = text_of(await client.get(f"/jobs/{jid}"))
    assert "succeeded" in shown
    assert "Ran for" in shown
    assert board.ran == ["copying <files>"]


async def test_a_succeeded_job_shows_its_result(board: Board, extra: Extra,
                                                client: httpx.AsyncClient) -> None:
    jid = await extra.answer.enqueue("<b>life</b>")
    assert jid is not None
    async with board.app.worker():
        await wait_until(state_is(board, jid, "succeeded"))
    page = await client.get(f"/jobs/{jid}")
    assert page.status_code == 200
    shown = text_of(page)
    assert "Result" in shown
    assert '"answer": 42' in shown
    assert '"tag": "<b>life</b>"' in shown
    assert "<b>life</b>" not in page.text  # escaped
    assert "/cancel" not in page.text  # nothing left to cancel


async def test_a_dead_job_shows_its_error(board: Board, client: httpx.AsyncClient) -> None:
    jid = await board.boom.enqueue("kaput")
    assert jid is not None
    async with board.app.worker():
        await wait_until(state_is(board, jid, "dead"))
    shown = text_of(await client.get(f"/jobs/{jid}"))
    assert "dead" in shown
    assert "RuntimeError: boom: kaput" in shown
    assert "web.boom" in shown


async def test_an_unknown_jid_is_said_plainly(client: httpx.AsyncClient) -> None:
    page = await client.get("/jobs/no-such-job")
    assert page.status_code == 200
    assert "Unknown: no job with this jid has a status record" in page.text
    assert "/cancel" not in page.text


async def test_text_that_cannot_be_a_jid_is_a_400_saying_why(
        client: httpx.AsyncClient) -> None:
    page = await client.get('/jobs/a"b')
    assert page.status_code == 400
    assert "This is not a jid" in page.text


async def test_cancel_needs_the_csrf_token(board: Board, client: httpx.AsyncClient) -> None:
    jid = await board.ok.enqueue("kept")
    assert jid is not None
    await client.get(f"/jobs/{jid}")  # the cookie, without the form's token
    refused = await client.post(f"/jobs/{jid}/cancel", data={})
    assert refused.status_code == 403
    assert "CSRF token" in refused.text
    assert (await board.app.status(jid)).state == "queued"


async def test_cancel_a_queued_job_and_it_never_runs(board: Board,
                                                     client: httpx.AsyncClient) -> None:
    jid = await board.ok.enqueue("never")
    assert jid is not None
    token = await page_token(client, f"/jobs/{jid}")
    response = await client.post(f"/jobs/{jid}/cancel", data={"csrf_token": token})
    assert response.status_code == 303
    assert response.headers["location"] == f"/jobs/{jid}?cancel=cancelled"
    shown = text_of(await client.get(response.headers["location"]))
    assert "Cancelled: the job will not run." in shown
    assert (await board.app.status(jid)).state == "cancelled"
    assert "/cancel" not in (await client.get(f"/jobs/{jid}")).text  # nothing to cancel

    await board.ok.enqueue("after")
    async with board.app.worker():
        await wait_until(lambda: "after" in board.ran)
    assert board.ran == ["after"]


async def test_cancel_a_running_job_stops_it(board: Board, extra: Extra,
                                             client: httpx.AsyncClient) -> None:
    jid = await extra.working.enqueue("long")
    assert jid is not None
    async with board.app.worker():
        await wait_until(state_is(board, jid, "running"))
        token = await page_token(client, f"/jobs/{jid}")
        response = await client.post(f"/jobs/{jid}/cancel", data={"csrf_token": token})
        assert response.headers["location"] == f"/jobs/{jid}?cancel=stopping"
        said = text_of(await client.get(response.headers["location"]))
        assert "Stopping: its process was asked to stop it" in said
        await wait_until(state_is(board, jid, "cancelled"), timeout=PROGRESS_SHOWN)
    assert board.ran == []  # stopped at its wait, never past it
    assert "cancelled" in text_of(await client.get(f"/jobs/{jid}"))


async def test_the_header_search_finds_a_job_from_any_tab(board: Board,
                                                          client: httpx.AsyncClient) -> None:
    for tab in ("/", "/busy", "/dead", "/metrics/jobs"):
        page = await client.get(tab)
        assert 'action="/jobs" role="search"' in page.text, tab
    jid = await board.ok.options(jid="report/2024 #1?x").enqueue("mine")
    assert jid == "report/2024 #1?x"
    found = await client.get("/jobs", params={"jid": f"  {jid} "})
    assert found.status_code == 303
    assert found.headers["location"] == "/jobs/report%2F2024%20%231%3Fx"
    shown = text_of(await client.get(found.headers["location"]))
    assert f"Job {jid} queued" in shown
    empty = await client.get("/jobs", params={"jid": ""})
    assert empty.status_code == 200
    assert "Type a job's jid" in empty.text


def test_progress_is_never_shown_done_early_and_info_stays_one_short_line() -> None:
    assert [format.percent(f) for f in (0.0, 0.4, 0.999, 1.0, None)] == [
        "0%", "40%", "99%", "100%", "–"]
    assert format.brief("two\nlines") == "two lines"
    long = format.brief({"step": "x" * 200})
    assert len(long) == format.BRIEF_CHARS
    assert long.startswith('{"step": "xxx')
    assert long.endswith("…")


# -- its arguments (read from wherever its payload is now) ------------------------------


def pretty_shown(value: Any) -> str:
    """``value``'s pretty JSON as ``text_of`` reads it off a page (spaces collapsed)."""
    return " ".join(format.pretty(value).split())


async def test_a_job_page_shows_its_arguments_wherever_the_job_is(
        board: Board, extra: Extra, client: httpx.AsyncClient) -> None:
    queued = await board.ok.enqueue(tag="<b>queued</b>")
    later = await board.ok.enqueue_in(3600, "<i>later</i>")
    assert queued is not None
    assert later is not None
    page = await client.get(f"/jobs/{queued}")
    assert "Keyword arguments" in text_of(page)
    assert pretty_shown({"tag": "<b>queued</b>"}) in text_of(page)
    assert "<b>queued</b>" not in page.text  # escaped, never markup
    shown = text_of(await client.get(f"/jobs/{later}"))
    assert pretty_shown(["<i>later</i>"]) in shown
    assert "its entry in Scheduled" in shown  # a link to the set's own page of it

    await board.dead_from("<s>dead</s>")
    await board.retries_from("<u>retrying</u>")
    for found in [*(await board.inspector.dead.page()).items,
                  *(await board.inspector.retries.page()).items]:
        assert found.jid is not None
        page = await client.get(f"/jobs/{found.jid}")
        assert pretty_shown(found.args) in text_of(page), found.args
        assert f'href="/{"dead" if found.name == "web.boom" else "retries"}/job/' in page.text

    running = await extra.working.enqueue("<em>running</em>")
    assert running is not None
    async with board.app.worker():
        await wait_until(state_is(board, running, "running"))
        assert pretty_shown(["<em>running</em>"]) in text_of(await client.get(f"/jobs/{running}"))
        extra.go_on.set()
        await wait_until(state_is(board, queued, "succeeded"))
    shown = text_of(await client.get(f"/jobs/{queued}"))
    assert "No arguments to show: a finished job's payload is not kept" in shown


async def test_a_huge_argument_is_cut_saying_how_big_it_is(
        board: Board, client: httpx.AsyncClient) -> None:
    huge = "é<" * 25_000  # 75,000 bytes of UTF-8: two-byte characters, and markup
    jid = await board.ok.enqueue(huge)
    assert jid is not None
    page = await client.get(f"/jobs/{jid}")
    assert page.status_code == 200
    whole = format.capped([huge])
    assert whole.cut
    assert whole.total_bytes == len(format.pretty([huge]).encode())
    said = f"Cut: the first {format.size(whole.shown_bytes)} of {format.size(whole.total_bytes)}"
    assert said == "Cut: the first 4.0 KiB of 73.2 KiB"
    assert said + " shown." in text_of(page)
    assert f'{markupsafe.escape(whole.text)}…</pre>' in page.text  # as Jinja escapes it
    assert len(page.text) < 4 * format.SHOWN_BYTES + 8_000  # the page, not the argument
    assert "é<é" not in page.text  # escaped


async def test_a_queued_job_deep_in_a_long_queue_is_said_not_found_so_far(
        board: Board, client: httpx.AsyncClient) -> None:
    filler = [((f"filler-{i}",), {}) for i in range(300)]
    await board.ok.enqueue_many(filler)
    jid = await board.ok.enqueue("in the middle")
    await board.ok.enqueue_many(filler)
    assert jid is not None
    shown = text_of(await client.get(f"/jobs/{jid}"))
    assert f"Job {jid} queued" in shown
    assert ("No arguments to show: the job was not found in its queue (this page reads the "
            "ends of a long queue") in shown


def test_capped_json_is_cut_at_a_whole_character() -> None:
    small = format.capped({"a": 1})
    assert (small.text, small.cut) == ('{\n  "a": 1\n}', False)
    cut = format.capped(["é" * 10], limit=10)  # '[\n  "' is 5 bytes, then 2 bytes each
    assert cut.text == '[\n  "éé'
    assert (cut.shown_bytes, cut.total_bytes, cut.cut) == (9, 28, True)
    assert format.capped(["\ud800"]).text == '[\n  "\ufffd"\n]'  # as every page shows it
