"""Flow control through real workers: a paused queue starts nothing until resumed (and
its running jobs finish), and a queue limit holds across every worker process — three
workers of concurrency 10 never run more than the limit of a queue at once."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from cogworker_async import App
from tests.waiting import wait_until

TIMEOUT = 20.0
PAUSE_BOUND = 1.0
"""Seconds within which a pause takes effect (the issue's promise)."""


class Gauge:
    """How many runs are inside at once, and the most ever seen."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self.done: list[str] = []

    async def hold(self, tag: str, seconds: float) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await anyio.sleep(seconds)
        finally:
            self.now -= 1
        self.done.append(tag)


async def test_a_queue_limit_holds_across_three_workers(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app(queues=["reports", "default"], concurrency=10,
                    queue_limits={"reports": 2})
    reports, others = Gauge(), Gauge()

    @jobs.job(queue="reports")
    async def report(tag: str) -> None:
        await reports.hold(tag, 0.05)

    @jobs.job(queue="default")
    async def other(tag: str) -> None:
        await others.hold(tag, 0.05)

    async with AsyncExitStack() as stack:
        for _ in range(3):
            await stack.enter_async_context(jobs.worker())
        await report.enqueue_many([((f"r{i}",), {}) for i in range(40)])
        await other.enqueue_many([((f"o{i}",), {}) for i in range(40)])
        await wait_until(lambda: len(reports.done) == 40 and len(others.done) == 40,
                         timeout=TIMEOUT)

    assert reports.most <= 2, reports.most
    assert reports.most == 2  # the limit is a limit, not a single lane
    assert others.most > 2  # the other queue is not held by it


async def test_a_paused_queue_starts_nothing_until_resumed(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app(queues=["reports", "default"])
    started: list[str] = []
    release = anyio.Event()

    @jobs.job(queue="reports")
    async def report(tag: str) -> None:
        started.append(tag)
        if tag == "running":
            await release.wait()

    @jobs.job(queue="default")
    async def other(tag: str) -> None:
        started.append(tag)

    async with jobs.worker():
        await report.enqueue("running")
        await wait_until(lambda: "running" in started, timeout=TIMEOUT)
        assert await jobs.pause("reports")
        assert list(await jobs.paused()) == ["reports"]
        await report.enqueue("while-paused")  # enqueues still land
        await other.enqueue("other queue")
        await wait_until(lambda: "other queue" in started, timeout=TIMEOUT)
        release.set()  # the running job finishes
        # The promise is "nothing starts within the bound": watch for longer than it.
        with anyio.move_on_after(PAUSE_BOUND * 2):
            await wait_until(lambda: "while-paused" in started, timeout=TIMEOUT)
        assert "while-paused" not in started
        assert await jobs.resume("reports")
        await wait_until(lambda: "while-paused" in started, timeout=TIMEOUT)
    assert await jobs.paused() == {}


async def test_a_pause_outlives_the_workers(make_app: Callable[..., App]) -> None:
    """The flag is in Redis: a worker started after the pause takes nothing either."""
    jobs = make_app()
    ran: list[Any] = []

    @jobs.job()
    async def work(tag: str) -> None:
        ran.append(tag)

    await jobs.pause("default")
    await work.enqueue("queued before the worker")
    async with jobs.worker():
        with anyio.move_on_after(PAUSE_BOUND * 2):
            await wait_until(lambda: bool(ran), timeout=TIMEOUT)
        assert ran == []
        await jobs.resume("default")
        await wait_until(lambda: ran == ["queued before the worker"], timeout=TIMEOUT)


async def test_a_basic_fetch_worker_obeys_a_pause_too(make_app: Callable[..., App]) -> None:
    jobs = make_app(fetch="basic")
    ran: list[str] = []

    @jobs.job()
    async def work(tag: str) -> None:
        ran.append(tag)

    await jobs.pause("default")
    await work.enqueue("held")
    async with jobs.worker():
        with anyio.move_on_after(PAUSE_BOUND * 2):
            await wait_until(lambda: bool(ran), timeout=TIMEOUT)
        assert ran == []
        await jobs.resume("default")
        await wait_until(lambda: ran == ["held"], timeout=TIMEOUT)


def test_queue_limits_are_checked_when_the_app_is_made() -> None:
    with pytest.raises(ValueError, match=r"queue_limits\['reports'\] must be between 1"):
        App("redis://127.0.0.1:1/0", queue_limits={"reports": 0})
    with pytest.raises(TypeError, match="must be an int"):
        App("redis://127.0.0.1:1/0", queue_limits={"reports": "2"})
    with pytest.raises(ValueError, match="invalid queue name"):
        App("redis://127.0.0.1:1/0", queue_limits={"no spaces": 2})
    with pytest.raises(ValueError, match="needs reliable fetch"):
        App("redis://127.0.0.1:1/0", queue_limits={"reports": 2}, fetch="basic")
