"""``run --burst``'s last line counts the jobs it ran in words a person writes: "1 job
run", "2 jobs run" (``stopper.py``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import pytest

from cogworker_async import App
from cogworker_async.worker.manager import Manager
from cogworker_async.worker.stopper import stop_when_drained

BURST_BOUND = 10.0
"""Seconds a burst over one or two no-op jobs may take (a few idle fetch intervals)."""


@pytest.mark.parametrize(("enqueued", "said"), [(1, "(1 job run)"), (2, "(2 jobs run)")])
async def test_a_burst_says_how_many_jobs_it_ran(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture, enqueued: int, said: str,
) -> None:
    jobs = make_app()

    @jobs.job(name="noop")
    async def noop() -> None: ...

    for _ in range(enqueued):
        await noop.enqueue()
    with caplog.at_level(logging.INFO, logger="cogworker_async"):
        async with jobs.worker() as worker:
            assert isinstance(worker, Manager)
            with anyio.fail_after(BURST_BOUND):
                await stop_when_drained(worker)
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("burst:")]
    assert line == f"burst: nothing left to do {said}: stopping"
