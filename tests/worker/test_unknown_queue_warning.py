"""The start's "a typo?" warning (manager.py ``_warn_of_unknown_queues``): said of a
``--queue`` name that matches nothing, never of a queue the App itself declares in
``App(queues=...)`` — the docs' first example must start without a warning."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from cogworker_async import App


def typo_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "(a typo?)" in r.getMessage()]


async def test_the_apps_declared_queues_start_without_a_warning(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    jobs = make_app(queues=["critical", "default"])  # the docs' first example

    @jobs.job(name="send_email")
    async def send_email(to: str) -> None: ...

    with caplog.at_level(logging.WARNING):
        async with jobs.worker():
            pass
    assert typo_warnings(caplog) == []


async def test_a_queue_name_that_matches_nothing_is_still_named(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    jobs = make_app(queues=["critical", "default"])

    @jobs.job(name="send_email")
    async def send_email(to: str) -> None: ...

    with caplog.at_level(logging.WARNING):
        async with jobs.worker(queues=["critical", "emials"]):  # as `run --queue` does
            pass
    [warning] = typo_warnings(caplog)
    assert "queue 'emials'" in warning
