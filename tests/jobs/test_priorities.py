"""Priorities end to end: a real worker on a real Redis (single and a 3-master cluster)
runs the higher priority first and first in, first out within one; a job keeps its
priority through a retry, a retry from dead by hand, and a chain's step; the admin sees
the jobs waiting per priority, in run order; bad priorities are refused at the call."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import App
from cogworker_async.admin import Inspector
from tests.conftest import url_of_topology
from tests.waiting import wait_until

WAIT = 15.0

redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)


def recorder(make_app: Callable[..., App], **settings: Any) -> tuple[App, list[str], Any]:
    """An app of one slot whose job ``tag(label)`` notes the labels in run order."""
    app = make_app(track_jobs=True, concurrency=1, **settings)
    ran: list[str] = []

    @app.job(name="tag", retry=0)
    async def tag(label: str) -> None:
        ran.append(label)

    return app, ran, tag


async def test_a_worker_runs_the_highest_priority_first_and_fifo_within_one(
    make_app: Callable[..., App],
) -> None:
    app, ran, tag = recorder(make_app, priority_aging=None)
    for label, priority in [("a0", 0), ("b-5", -5), ("c7", 7), ("d0", 0), ("e7", 7),
                            ("f10", 10), ("g-5", -5)]:
        await tag.options(priority=priority).enqueue(label)

    async with app.worker():
        await wait_until(lambda: len(ran) == 7, timeout=WAIT)

    assert ran == ["f10", "c7", "e7", "a0", "d0", "b-5", "g-5"]


async def test_the_decorators_priority_is_the_default_and_options_override_it(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True, concurrency=1, priority_aging=None)
    ran: list[str] = []

    @app.job(name="urgent", priority=9)
    async def urgent(label: str) -> None:
        ran.append(label)

    @app.job(name="plain")
    async def plain(label: str) -> None:
        ran.append(label)

    await plain.enqueue("plain")
    await urgent.enqueue("urgent")
    await urgent.options(priority=-1).enqueue("demoted")
    await plain.enqueue_many([(("many",), {})])
    async with app.worker():
        await wait_until(lambda: len(ran) == 4, timeout=WAIT)

    assert ran == ["urgent", "plain", "many", "demoted"]


async def test_a_retry_keeps_its_priority(make_app: Callable[..., App]) -> None:
    app = make_app(track_jobs=True, concurrency=1, priority_aging=None)
    ran: list[str] = []
    gate = anyio.Event()

    @app.job(name="flaky", retry=1, retry_in=lambda attempt, error: 0.0, priority=5)
    async def flaky() -> None:
        ran.append("flaky")
        if ran.count("flaky") == 1:
            raise ValueError("once")

    @app.job(name="low", priority=-2)
    async def low(n: int) -> None:
        await gate.wait()
        ran.append(f"low{n}")

    await flaky.enqueue()
    for n in range(3):  # queued before the retry exists: first in line but for priority
        await low.enqueue(n)
    async with app.worker():
        # the retry is back on its queue at priority 5 (or ran already) while low0 may
        # hold the only slot
        await wait_until(lambda: _retried(app, ran), timeout=WAIT)
        gate.set()
        await wait_until(lambda: len(ran) == 5, timeout=WAIT)

    assert ran[0] == "flaky"
    assert ran.index("flaky", 1) < ran.index("low1")


async def _retried(app: App, ran: list[str]) -> bool:
    """The first run failed and its retry is back on the queue (or ran already)."""
    if "flaky" not in ran:  # before its first run, the job itself waits at 5
        return False
    [info] = await Inspector(app).queues.infos(["default"])
    return info.by_priority.get(5, 0) == 1 or ran.count("flaky") == 2


async def test_a_dead_job_retried_by_hand_keeps_its_priority(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True, concurrency=1)

    @app.job(name="doomed", retry=0, priority=4)
    async def doomed() -> None:
        raise ValueError("no")

    async with app.worker():
        jid = await doomed.enqueue()
        await wait_until(lambda: _state(app, jid, "dead"), timeout=WAIT)
    insp = Inspector(app)
    [record] = (await insp.dead.page()).items
    assert (await insp.dead.retry([record.token])).done == 1

    [info] = await insp.queues.infos(["default"])
    assert info.by_priority == {4: 1}


async def _state(app: App, jid: str | None, state: str) -> bool:
    assert jid is not None
    return (await app.status(jid)).state == state


async def test_the_admin_sees_jobs_per_priority_in_run_order(
    make_app: Callable[..., App],
) -> None:
    app, _, tag = recorder(make_app)
    for label, priority in [("a", 0), ("b", 3), ("c", -1), ("d", 3), ("e", 0)]:
        await tag.options(priority=priority).enqueue(label)
    insp = Inspector(app)

    [info] = await insp.queues.infos(["default"])
    page = await insp.queue("default").page(1, 10)
    second = await insp.queue("default").page(2, 2)

    assert (info.size, info.by_priority) == (5, {3: 2, 0: 2, -1: 1})
    assert [record.args[0] for record in page.items] == ["b", "d", "a", "e", "c"]
    assert [record.args[0] for record in second.items] == ["a", "e"]
    seen_c = page.items[4]
    assert (await insp.queue("default").delete([seen_c.token])).done == 1
    assert (await insp.queue("default").clear()) == 4
    [info] = await insp.queues.infos(["default"])
    assert (info.size, info.by_priority) == (0, {})


async def test_a_chain_step_keeps_its_priority(make_app: Callable[..., App]) -> None:
    app, ran, tag = recorder(make_app)

    async with app.worker():  # serves "default" only: the second step waits on "later"
        await app.chain(tag.s("first"), tag.options(queue="later", priority=8).s("second"),
                        ).enqueue()
        await wait_until(lambda: _waiting_on(app, "later", {8: 1}), timeout=WAIT)

    assert ran == ["first"]


async def _waiting_on(app: App, queue: str, by_priority: dict[int, int]) -> bool:
    [info] = await Inspector(app).queues.infos([queue])
    return dict(info.by_priority) == by_priority


@pytest.mark.parametrize(("value", "error"), [
    (11, ValueError), (-11, ValueError), (2.5, TypeError), ("3", TypeError),
    (True, TypeError), (None, None)])
def test_a_bad_priority_is_refused_at_the_call(
    make_app: Callable[..., App], value: Any, error: type[Exception] | None
) -> None:
    app = make_app()

    @app.job(name="fine")
    async def fine() -> None: ...

    if error is None:  # None: options() leaves the job's own
        assert fine.options(priority=value).job_options.priority == 0
        return
    with pytest.raises(error, match="priority"):
        fine.options(priority=value)
    with pytest.raises(error, match="priority"):
        app.job(name=f"bad{value!r}", priority=value)(lambda: None)


def test_priority_aging_is_checked_at_the_app(make_app: Callable[..., App]) -> None:
    with pytest.raises(ValueError, match="priority_aging"):
        make_app(priority_aging=0)
    with pytest.raises(TypeError, match="priority_aging"):
        make_app(priority_aging="5")
    assert make_app(priority_aging=None).settings.priority_aging is None


async def test_aging_bounds_a_low_jobs_wait_under_a_flood_of_priority_10(
    make_app: Callable[..., App],
) -> None:
    """With aging S, a job of priority p enqueued at t goes before every job enqueued
    after t + (10 - p) * S: under a flood that never lets the queue empty, it runs once
    the jobs enqueued before then have started — and none enqueued later starts first."""
    aging, priority = 0.05, -10
    app = make_app(track_jobs=True, concurrency=1, priority_aging=aging)
    started: list[tuple[str, float]] = []  # (label, its enqueued_at)

    @app.job(name="work", retry=0)
    async def work(label: str, enqueued_at: float) -> None:
        started.append((label, enqueued_at))
        await anyio.sleep(0.002)

    async def flood(stop: anyio.Event) -> None:
        # Never lets the queue empty, and never lets it grow past a few dozen jobs: the
        # low job's wait is then the aging window, whatever the machine's speed.
        enqueued = 0
        while not stop.is_set():
            if enqueued - len(started) < 30:
                now = time.time()
                await work.options(priority=10).enqueue_many([(("flood", now), {})] * 10)
                enqueued += 10
            else:
                await anyio.sleep(0.001)

    stop = anyio.Event()
    async with app.worker(), anyio.create_task_group() as tg:
        tg.start_soon(flood, stop)
        await wait_until(lambda: len(started) > 50, timeout=WAIT)
        low_at = time.time()
        await work.options(priority=priority).enqueue("low", low_at)
        await wait_until(lambda: any(label == "low" for label, _ in started), timeout=WAIT)
        stop.set()

    bound = low_at + (10 - priority) * aging
    position = [label for label, _ in started].index("low")
    before = [at for label, at in started[:position] if label == "flood"]
    assert before, "the flood never got ahead of the low job: nothing was proven"
    assert max(before) <= bound + 0.005  # enqueued_at is the client's clock, as here
    assert any(at > low_at for at in before), "aging gave nothing to wait behind"
