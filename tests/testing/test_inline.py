"""``jobs.testing.inline()``: each enqueue runs its job at once, in the caller, through the
server middleware and with its context; what the job raises reaches the caller."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from cogworker_async import App, JobContext, JobTimeout, current_job
from cogworker_async.middleware import RunNext
from cogworker_async.testing import MAX_INLINE_DEPTH, TooManyRuns


async def test_each_enqueue_runs_its_job_before_returning(
        offline_app: Callable[..., App]) -> None:
    jobs = offline_app()
    seen: list[str] = []

    async def around(job: JobContext, call_next: RunNext) -> None:
        seen.append(f"middleware {job.name}")
        await call_next(job)

    jobs.add_server_middleware(around)

    @jobs.job(name="welcome")
    async def welcome(to: str) -> None:
        seen.append(f"welcome {to} attempt {current_job().attempt}")
        await receipt.enqueue_in(3600, to)  # scheduled: runs at once too

    @jobs.job(name="receipt")
    def receipt(to: str) -> None:
        seen.append(f"receipt {to} {current_job().name}")

    with jobs.testing.inline() as testing:
        jid = await welcome.enqueue("a@x.org")
        assert jid is not None
        assert seen == ["middleware welcome", "welcome a@x.org attempt 1",
                        "middleware receipt", "receipt a@x.org receipt"]
        assert testing.status(jid).state == "succeeded"
        assert testing.enqueued() == []
        assert [run.outcome for run in testing.runs()] == ["succeeded", "succeeded"]
        await anyio.to_thread.run_sync(receipt.enqueue_sync, "b@x.org")
    assert seen[-1] == "receipt b@x.org receipt"


async def test_what_the_job_raises_reaches_the_caller_and_is_not_retried(
        offline_app: Callable[..., App]) -> None:
    jobs = offline_app()
    runs: list[int] = []

    @jobs.job(name="fails", retry=5)
    async def fails() -> None:
        runs.append(current_job().attempt)
        raise RuntimeError("boom")

    @jobs.job(name="slow", timeout=0.05)
    async def slow() -> None:
        await anyio.sleep(3600)

    with jobs.testing.inline() as testing:
        with pytest.raises(RuntimeError, match="boom"):
            await fails.enqueue()
        with pytest.raises(JobTimeout):
            await slow.enqueue()
        assert [run.outcome for run in testing.runs()] == ["dead", "dead"]
    assert runs == [1]


async def test_unique_locks_are_taken_and_released_around_the_run(
        offline_app: Callable[..., App]) -> None:
    jobs = offline_app()
    answers: list[str | None] = []

    @jobs.job(name="report", unique=True)
    async def report(day: str) -> None:
        answers.append(await report.enqueue(day))  # its own duplicate, while it runs

    with jobs.testing.inline():
        assert await report.enqueue("monday") is not None
        assert await report.enqueue("monday") is not None  # the first one ended
    assert answers == [None, None]


async def test_runaway_nesting_stops(offline_app: Callable[..., App]) -> None:
    jobs = offline_app()
    depth: list[int] = []

    @jobs.job(name="again")
    async def again(n: int) -> None:
        depth.append(n)
        await again.enqueue(n + 1)

    with jobs.testing.inline(), pytest.raises(TooManyRuns, match="nested"):
        await again.enqueue(1)
    assert len(depth) == MAX_INLINE_DEPTH
