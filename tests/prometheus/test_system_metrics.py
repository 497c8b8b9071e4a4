"""The system-wide gauges (``render``, what the dashboard's ``/metrics`` serves) say what
is in Redis: queue sizes and latency, the three sets, live processes; and an outage is
``cogworker_up 0`` within the bound, logged once, never a hung or failed scrape."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import AsyncIterator
from typing import Final

import anyio
import pytest

from cogworker_async import App
from cogworker_async.admin import Inspector
from cogworker_async.prometheus import system
from cogworker_async.prometheus.system import READING, render
from cogworker_async.worker.streak import Streak
from tests.cli import adminapp
from tests.prometheus.scraping import names, parse, value
from tests.servers import free_port
from tests.waiting import wait_until

LATER: Final = 3600.0
"""Seconds ahead a scheduled job is due (it stays scheduled)."""
SHORT_BOUND: Final = 0.5
"""Seconds a read may take in the outage tests (the real bound is longer)."""
SYSTEM_GAUGES: Final = {"cogworker_queue_size", "cogworker_queue_latency_seconds",
                        "cogworker_queue_paused", "cogworker_jobs_waiting_for_parents",
                        "cogworker_queue_demand",
                        "cogworker_scheduled_size", "cogworker_retry_size",
                        "cogworker_dead_size", "cogworker_processes",
                        "cogworker_batches_open"}


@pytest.fixture
async def jobs(redis_url: str, namespace: str) -> AsyncIterator[adminapp.Jobs]:
    built = adminapp.build(namespace, redis_url)
    yield built
    await built.app.close()


async def sizes_are(insp: Inspector, retries: int, dead: int) -> bool:
    return (await insp.retries.size(), await insp.dead.size()) == (retries, dead)


async def test_the_gauges_say_what_is_in_redis(jobs: adminapp.Jobs) -> None:
    insp = Inspector(jobs.app)
    await jobs.flaky.enqueue("a")  # fails: waits an hour in retries
    await jobs.doomed.enqueue("b")  # fails: dead at once
    await jobs.doomed.enqueue("c")
    async with jobs.app.worker():
        await wait_until(lambda: sizes_are(insp, 1, 2))
        body, content_type = await render(insp)
        running = parse(body.decode())
    assert value(running, "cogworker_processes") == 1
    assert content_type.startswith("text/plain; version=0.0.4")

    before = time.time()
    for tag in ("d", "e", "f"):
        await jobs.ok.enqueue(tag)
    await jobs.ok.options(queue="mail").enqueue("g")
    async with jobs.app.batch():
        await jobs.ok.enqueue_in(LATER, "h")  # a member that waits: the batch is open
    samples = parse((await render(insp))[0].decode())
    assert value(samples, "cogworker_batches_open") == 1
    assert value(samples, "cogworker_up") == 1
    assert value(samples, "cogworker_queue_size", queue="default") == 3
    assert value(samples, "cogworker_queue_size", queue="mail") == 1
    latency = value(samples, "cogworker_queue_latency_seconds", queue="default")
    assert latency is not None
    assert 0 <= latency <= time.time() - before + 0.01
    assert value(samples, "cogworker_scheduled_size") == 1
    assert value(samples, "cogworker_retry_size") == 1
    assert value(samples, "cogworker_dead_size") == 2
    assert value(samples, "cogworker_processes") == 0  # the worker has stopped
    assert value(samples, "cogworker_queue_paused", queue="mail") == 0
    await jobs.app.pause("mail")
    paused = parse((await render(insp))[0].decode())
    assert value(paused, "cogworker_queue_paused", queue="mail") == 1
    assert value(paused, "cogworker_queue_paused", queue="default") == 0

    await insp.queue("default").clear()
    emptied = parse((await render(insp))[0].decode())
    assert value(emptied, "cogworker_queue_size", queue="default") == 0
    assert value(emptied, "cogworker_queue_latency_seconds", queue="default") == 0


async def test_the_jobs_waiting_for_their_parents_are_a_gauge_per_queue(
        jobs: adminapp.Jobs) -> None:
    insp = Inspector(jobs.app)
    parent = await jobs.ok.enqueue_in(LATER, "parent")  # scheduled: its children wait
    assert parent is not None
    for tag in ("a", "b"):
        await jobs.ok.options(after=[parent], queue="mail").enqueue(tag)
    await jobs.ok.options(after=[parent]).enqueue("c")
    samples = parse((await render(insp))[0].decode())
    assert value(samples, "cogworker_jobs_waiting_for_parents", queue="mail") == 2
    assert value(samples, "cogworker_jobs_waiting_for_parents", queue="default") == 1
    assert value(samples, "cogworker_queue_size", queue="mail") == 0  # not on its list

    [entry] = (await insp.scheduled.page()).items
    await insp.scheduled.retry([entry.token])  # the parent runs now; its children follow
    async with jobs.app.worker():
        await wait_until(lambda: _waiting_total(insp, 0))
    released = parse((await render(insp))[0].decode())
    assert value(released, "cogworker_jobs_waiting_for_parents", queue="mail") == 0
    assert value(released, "cogworker_jobs_waiting_for_parents", queue="default") == 0


async def _waiting_total(insp: Inspector, wanted: int) -> bool:
    return (await insp.summary())["waiting_for_parents"] == wanted


async def test_redis_down_is_up_0_and_nothing_else(namespace: str) -> None:
    app = App(f"redis://127.0.0.1:{free_port()}", namespace=namespace)  # nobody there
    try:
        with anyio.fail_after(system.SCRAPE_TIMEOUT):
            body, _ = await render(Inspector(app))
    finally:
        await app.close()
    samples = parse(body.decode())
    assert value(samples, "cogworker_up") == 0
    assert names(samples) & SYSTEM_GAUGES == set()


async def test_a_redis_that_does_not_answer_is_up_0_within_the_bound(
    namespace: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that takes the connection and never replies (hung, paused, a black
    hole): each scrape answers within the bound, and the outage is logged once."""
    monkeypatch.setattr(system, "SCRAPE_TIMEOUT", SHORT_BOUND)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel accepts; nobody reads or answers
        app = App(f"redis://127.0.0.1:{silent.getsockname()[1]}", namespace=namespace)
        streak = Streak(READING)
        try:
            for _ in range(2):
                began = time.monotonic()
                body, _ = await render(Inspector(app), streak=streak)
                assert time.monotonic() - began < SHORT_BOUND + 1.0
                assert value(parse(body.decode()), "cogworker_up") == 0
        finally:
            await app.close()
    warnings = [r for r in caplog.records
                if r.levelno >= logging.WARNING and READING in r.getMessage()]
    assert len(warnings) == 1


async def test_demand_counts_due_jobs_with_no_worker_and_a_worker_then_runs_them(
        redis_url: str, namespace: str) -> None:
    """With zero workers, jobs scheduled 1 s ahead enter ``cogworker_queue_demand`` once
    due (the sets are read, nothing is promoted): a scaler wakes a worker for them,
    which runs them."""
    app = App(redis_url, namespace=namespace, poll_interval=0.05, track_jobs=False)
    ran: list[int] = []

    @app.job(name="later")
    async def later(n: int) -> None:
        ran.append(n)

    insp = Inspector(app)
    try:
        for n in range(10):
            await later.enqueue_in(1.0, n)
        before = parse((await render(insp))[0].decode())
        assert value(before, "cogworker_queue_demand", queue="default") == 0  # not due yet
        await wait_until(lambda: _demand_is(insp, 10), timeout=10)
        assert value(parse((await render(insp))[0].decode()), "cogworker_queue_size",
                     queue="default") == 0  # still in the schedule: nobody promoted them
        async with app.worker():
            await wait_until(lambda: len(ran) == 10, timeout=10)
        assert sorted(ran) == list(range(10))
        assert await _demand_is(insp, 0)
    finally:
        await app.close()


async def test_demand_counts_the_jobs_running(redis_url: str, namespace: str) -> None:
    app = App(redis_url, namespace=namespace, poll_interval=0.05)
    gate = anyio.Event()

    @app.job(name="hold")
    async def hold() -> None:
        await gate.wait()

    insp = Inspector(app)
    try:
        await hold.enqueue()
        await hold.enqueue()
        async with app.worker(concurrency=1):
            await wait_until(lambda: _running_is(insp, 1), timeout=10)
            [info] = await insp.queues.infos(["default"])
            assert (info.size, info.due, info.running, info.demand) == (1, 0, 1, 2)
            gate.set()
    finally:
        await app.close()


async def _demand_is(insp: Inspector, wanted: int) -> bool:
    samples = parse((await render(insp))[0].decode())
    return value(samples, "cogworker_queue_demand", queue="default") == wanted


async def _running_is(insp: Inspector, wanted: int) -> bool:
    [info] = await insp.queues.infos(["default"])
    return info.running == wanted


async def test_a_scrape_reads_the_queues_unserved_mark(redis_url: str, namespace: str) -> None:
    """The scrape reads the processes once and hands them to the queue rows: the rows
    still carry the unserved mark, and the live process count."""
    app = App(redis_url, namespace=namespace, poll_interval=0.05, track_jobs=False)
    release = anyio.Event()

    @app.job(name="hold")
    async def hold() -> None:
        await release.wait()

    insp = Inspector(app)
    try:
        await hold.enqueue()
        await hold.options(queue="nobody").enqueue()
        alone = await system.read(insp)
        assert {q.name: q.state for q in alone.queues} == {
            "default": "unserved", "nobody": "unserved"}
        async with app.worker(concurrency=1):
            await wait_until(lambda: _running_is(insp, 1), timeout=10)
            await hold.enqueue()  # waits on the queue the worker serves
            served = await system.read(insp)
            release.set()
        assert served.processes == 1
        assert {q.name: q.state for q in served.queues} == {
            "default": "running", "nobody": "unserved"}
    finally:
        await app.close()
