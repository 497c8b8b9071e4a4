"""The header's processed total and the Dashboard's "today" read the same jobs: run a
batch, reset the stats and run it again (what ``make run`` does each time) and both say
one batch — before, the reset cleared the totals but not the day's count (357 against
"today: 714" after two demos)."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import url_of_topology
from tests.waiting import wait_until
from tests.web.conftest import Board

# The reset deletes the totals and a year of day keys in one DEL: on a cluster too.
redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)

JOBS = 7
HEADER = re.compile(r'data-total="processed">([\d,]+)<')
TODAY = re.compile(r"today[^:]*: ([\d,]+) processed, ([\d,]+) failed")


async def _run_batch(board: Board, first: int) -> None:
    for n in range(first, first + JOBS):
        await board.ok.enqueue(f"job-{n}")

    async def flushed() -> bool:
        return (await board.inspector.stats.totals()).processed == JOBS

    async with board.app.worker(concurrency=5):
        await wait_until(flushed, timeout=15)


def _number(pattern: re.Pattern[str], html: str) -> int:
    found = pattern.search(html)
    assert found is not None, f"{pattern.pattern!r} not on the page"
    return int(found.group(1).replace(",", ""))


async def test_header_and_today_agree_after_a_reset_and_a_second_run(
        board: Board, client: httpx.AsyncClient) -> None:
    await board.inspector.stats.reset()
    await _run_batch(board, 0)
    html = (await client.get("/")).text
    assert _number(HEADER, html) == _number(TODAY, html) == JOBS

    await board.inspector.stats.reset()
    await _run_batch(board, JOBS)
    html = (await client.get("/")).text
    assert len(board.ran) == 2 * JOBS
    assert _number(HEADER, html) == JOBS
    assert _number(TODAY, html) == JOBS, "today still counts the batch before the reset"
    history = await board.inspector.stats.history()
    assert history[-1].processed == JOBS
