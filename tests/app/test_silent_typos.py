"""Typos that used to pass in silence (issue 25, item 19): a queue limit on a queue no
worker serves. (A non-numeric database in a URL: test_jids_and_results.py; pausing a
queue nobody uses: tests/cli/test_pause_cli.py; an overflowing --metrics-port:
tests/cli/supervisor.)"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from cogworker_async import App
from tests.waiting import wait_until


async def test_a_queue_limit_on_a_queue_the_worker_does_not_serve_is_said(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    jobs = make_app(queues=["reports", "default"], queue_limits={"reprots": 2, "reports": 1})
    ran: list[int] = []

    @jobs.job(name="work", queue="reports")
    async def work(n: int) -> None:
        ran.append(n)

    await work.enqueue(1)
    with caplog.at_level(logging.WARNING, logger="cogworker_async"):
        async with jobs.worker():
            await wait_until(lambda: ran == [1], timeout=10)
    said = [r.getMessage() for r in caplog.records if "queue_limits names" in r.getMessage()]
    assert len(said) == 1
    assert "'reprots'" in said[0]
    assert "a typo?" in said[0]
