"""Expiring jobs through a real worker: a job not started by its deadline is not run —
filed in dead as ``Expired`` (the death hook hears it), or dropped with
``dead_on_expiry=False`` — and a job within its deadline runs as any other. Bad
deadlines are refused at the enqueue, naming the problem."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from cogworker_async import App, Death, JobFailed
from cogworker_async.admin import Inspector
from cogworker_async.enqueue.handles import JobFunction
from tests.waiting import wait_until

TIMEOUT = 20.0


def _app(make_app: Callable[..., App]) -> tuple[App, JobFunction[[str], Awaitable[None]],
                                                list[str], list[Death]]:
    jobs = make_app()
    ran: list[str] = []
    deaths: list[Death] = []

    @jobs.job(name="work")
    async def work(tag: str) -> None:
        ran.append(tag)

    jobs.on_death(deaths.append)
    return jobs, work, ran, deaths


async def _let_pass(seconds: float) -> None:
    """Let a deadline pass (the scenario: jobs enqueued while no worker runs)."""
    deadline = time.time() + seconds

    async def passed() -> bool:
        return time.time() > deadline
    await wait_until(passed, timeout=seconds + 5, every=0.02)


async def test_expired_jobs_are_dead_or_dropped_and_timely_ones_run(
    make_app: Callable[..., App],
) -> None:
    jobs, work, ran, deaths = _app(make_app)
    late = await work.options(expires_in=0.2).enqueue("late")
    dropped = await work.options(expires_in=timedelta(milliseconds=200),
                                 dead_on_expiry=False).enqueue("dropped")
    timely = await work.options(expires_at=datetime.now(UTC) + timedelta(hours=1)
                                ).enqueue("timely")
    plain = await work.enqueue("plain")
    assert late is not None
    assert dropped is not None
    assert timely is not None
    assert plain is not None
    await _let_pass(0.3)

    async with jobs.worker():
        await wait_until(lambda: sorted(ran) == ["plain", "timely"], timeout=TIMEOUT)
        await wait_until(lambda: len(deaths) == 1, timeout=TIMEOUT)

    assert sorted(ran) == ["plain", "timely"]  # neither expired job ran
    assert (deaths[0].jid, deaths[0].reason) == (late, "Expired")
    assert "not started by its deadline" in deaths[0].message
    dead = await Inspector(jobs).dead.page()
    assert [(entry.jid, entry.error_class) for entry in dead.items] == [(late, "Expired")]
    status = await jobs.status(late)
    assert status.state == "dead"
    assert status.error is not None
    assert status.error.startswith("Expired")
    with pytest.raises(JobFailed):
        await jobs.result(late, timeout=1)
    assert (await jobs.status(dropped)).state == "cancelled"
    assert (await jobs.status(timely)).state == "succeeded"


async def test_a_job_level_deadline_applies_to_every_enqueue(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()
    ran: list[str] = []

    @jobs.job(expires_in=0.2)
    async def hurried(tag: str) -> None:
        ran.append(tag)

    jid = await hurried.enqueue("too late")
    assert jid is not None
    await _let_pass(0.3)
    async with jobs.worker():
        async def dead() -> bool:
            return (await jobs.status(jid)).state == "dead"
        await wait_until(dead, timeout=TIMEOUT)
    assert ran == []


async def test_bad_deadlines_are_refused_at_the_enqueue(make_app: Callable[..., App]) -> None:
    jobs, work, _, _ = _app(make_app)
    with pytest.raises(ValueError, match="would expire before it could run"):
        await work.options(expires_at=time.time() - 1).enqueue("past")
    with pytest.raises(ValueError, match="would expire before it could run"):
        await work.options(expires_at=time.time() + 10).enqueue_in(60, "due after it")
    with pytest.raises(ValueError, match="expires_in or expires_at, not both"):
        work.options(expires_in=10, expires_at=time.time() + 60)
    with pytest.raises(ValueError, match="expires_in must be a number of seconds > 0"):
        await work.options(expires_in=0).enqueue("zero")
    with pytest.raises(TypeError, match="expires_in must be seconds or a timedelta"):
        work.options(expires_in="soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="aware datetime"):
        work.options(expires_at=datetime.now())  # naive
    with pytest.raises(TypeError, match="dead_on_expiry must be True or False"):
        await work.options(expires_in=10, dead_on_expiry=1).enqueue("x")  # type: ignore[arg-type]
    assert await Inspector(jobs).queue("default").info() is not None
    assert (await Inspector(jobs).queue("default").info()).size == 0  # nothing landed


async def test_expires_in_counts_from_a_scheduled_job_s_due_time(
    make_app: Callable[..., App],
) -> None:
    """As Sidekiq's: a job scheduled for later gets its whole window once it is due."""
    jobs = make_app()

    @jobs.job(expires_in=300)
    async def later(tag: str) -> None:
        pass

    before = time.time()
    jid = await later.enqueue_in(3600, "in an hour")
    assert jid is not None
    (entry,) = (await Inspector(jobs).scheduled.page()).items
    assert entry.payload is not None
    deadline = entry.payload["expires_at"]
    assert before + 3600 + 300 <= deadline <= time.time() + 3600 + 300
