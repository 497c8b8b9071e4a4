"""Executor on its own: a job runs in its context through the middleware, its timeout
is enforced (an async job is cancelled; a plain function's thread is abandoned, its slot
held until it returns), and every run is counted."""

from __future__ import annotations

import math
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from cogworker_async import App, JobContext, current_job
from cogworker_async.errors import JobTimeout
from cogworker_async.worker.execute import Counters, Executor, Leftover

TIMEOUT = 0.05
BLOCKED_FOR = 30.0
"""Longer than any test: the job only ends when the test lets it."""


async def never_orphaned(queue: str, jid: str) -> int:
    return 0


def executor(counters: Counters, middleware: list[Any] | None = None) -> Executor:
    return Executor(counters, middleware or [], anyio.CapacityLimiter(2), never_orphaned)


def payload(name: str, *args: object, retry_count: int | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"jid": "j1", "class": name, "args": list(args), "kwargs": {},
                           "queue": "default", "enqueued_at": 5.0, "created_at": 4.0}
    if retry_count is not None:
        raw["retry_count"] = retry_count
    return raw


@pytest.fixture
def app() -> App:
    return App("redis://127.0.0.1:1", namespace="unused")


async def test_a_job_runs_in_its_context_through_the_middleware(app: App) -> None:
    seen: list[object] = []

    @app.job(name="greet")
    async def greet(who: str) -> None:
        job = current_job()
        seen.append((who, job.jid, job.attempt, job.enqueued_at))

    async def outer(job: JobContext, call_next: Callable[[JobContext], Awaitable[None]]) -> None:
        seen.append("before")
        await call_next(job)
        seen.append("after")

    counters = Counters()
    await executor(counters, [outer]).run(app.registry["greet"], payload("greet", "ann",
                                                                          retry_count=0),
                                          "default", Leftover())
    assert seen == ["before", ("ann", "j1", 2, 5.0), "after"]
    assert (counters.processed, counters.failed) == (1, 0)


async def test_a_failing_job_raises_its_error_and_is_counted(app: App) -> None:
    @app.job(name="fails")
    async def fails() -> None:
        raise ValueError("boom")

    counters = Counters()
    with pytest.raises(ValueError, match="boom"):
        await executor(counters).run(app.registry["fails"], payload("fails"), "default",
                                     Leftover())
    assert (counters.processed, counters.failed) == (1, 1)


async def test_an_async_job_over_its_timeout_is_cancelled(app: App) -> None:
    cancelled = []

    @app.job(name="slow", timeout=TIMEOUT)
    async def slow() -> None:
        try:
            await anyio.sleep(BLOCKED_FOR)
        except anyio.get_cancelled_exc_class():
            cancelled.append(True)
            raise

    with anyio.fail_after(5), pytest.raises(JobTimeout):
        await executor(Counters()).run(app.registry["slow"], payload("slow"), "default",
                                       Leftover())
    assert cancelled == [True]


async def test_a_plain_function_over_its_timeout_fails_at_once_and_holds_its_slot(
    app: App,
) -> None:
    release = threading.Event()

    @app.job(name="blocking", timeout=TIMEOUT)
    def blocking() -> None:
        release.wait(BLOCKED_FOR)

    leftover = Leftover()
    with anyio.fail_after(5), pytest.raises(JobTimeout, match="plain function"):
        await executor(Counters()).run(app.registry["blocking"], payload("blocking"),
                                       "default", leftover)
    assert leftover.thread_done is not None
    assert not leftover.thread_done.is_set()  # its thread runs on: the slot stays busy
    release.set()
    with anyio.fail_after(5):
        await leftover.thread_done.wait()


async def test_a_plain_function_within_its_timeout_leaves_nothing_behind(app: App) -> None:
    @app.job(name="quick", timeout=5.0)
    def quick(n: int) -> int:
        return n * 2

    leftover = Leftover()
    await executor(Counters()).run(app.registry["quick"], payload("quick", 2), "default",
                                   leftover)
    assert leftover.thread_done is None


def test_stamps_that_are_not_finite_numbers_read_as_none(app: App) -> None:
    """The context reads ``enqueued_at``/``created_at`` by the one number rule
    (``job.number``): NaN, infinities and ints past a float's range are no time."""
    @app.job(name="stamped")
    async def stamped() -> None: ...

    stored = {**payload("stamped"), "enqueued_at": math.inf, "created_at": 10**400}
    context = executor(Counters()).context(app.registry["stamped"], stored, "default")
    assert context.enqueued_at is None
    assert context.created_at is None
    assert context.payload is stored  # the job sees the payload itself, not a copy
