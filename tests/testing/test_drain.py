"""``await jobs.testing.drain()``: recorded jobs run through the worker's own processor —
middleware, context, timeouts, retries, ``discard_on``, ``Retry``, expiry, results,
limiters, hooks — with no Redis, and each run's outcome is there to assert on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import (
    App,
    Death,
    JobContext,
    JobTimeout,
    OverLimit,
    Retry,
    current_job,
)
from cogworker_async.errors import Expired
from cogworker_async.middleware import RunNext
from cogworker_async.testing import TooManyRuns
from tests.waiting import wait_until


async def test_outcomes_of_failures_as_a_worker_decides_them(
        offline_app: Callable[..., App]) -> None:
    jobs = offline_app()

    @jobs.job(name="always_fails", retry=2)
    async def always_fails() -> None:
        raise RuntimeError("boom")

    @jobs.job(name="asks_later", retry=1)
    async def asks_later() -> None:
        if current_job().attempt == 1:
            raise Retry(in_=60)

    @jobs.job(name="forbidden", retry=5, discard_on=(PermissionError,))
    async def forbidden() -> None:
        raise PermissionError("no")

    @jobs.job(name="slow", retry=False, timeout=0.05)
    async def slow() -> None:
        await anyio.sleep(3600)

    with jobs.testing.fake() as testing:
        for job in (always_fails, asks_later, forbidden, slow):
            await job.enqueue()
        runs = await testing.drain()

    assert [(run.name, run.attempt, run.outcome) for run in runs] == [
        ("always_fails", 1, "retried"), ("asks_later", 1, "retried"),
        ("forbidden", 1, "discarded"), ("slow", 1, "dead"),
        ("always_fails", 2, "retried"), ("asks_later", 2, "succeeded"),
        ("always_fails", 3, "dead"),
    ]
    assert runs[1].delay == 60  # what Retry(in_=60) asked for; drain did not wait
    assert runs[0].delay is not None
    assert isinstance(runs[0].error, RuntimeError)
    assert isinstance(runs[3].error, JobTimeout)
    dead = runs[-1].entry
    assert dead is not None
    assert (dead["error_class"], dead["error_message"], dead["retry_count"]) == \
        ("RuntimeError", "boom", 2)
    assert testing.runs(job=always_fails, outcome="dead") == [runs[-1]]
    status = testing.status(runs[-1].jid)
    assert (status.state, status.error) == ("dead", "RuntimeError: boom")


async def test_retries_may_be_left_waiting_and_scheduled_jobs_run_only_when_asked(
        offline_app: Callable[..., App]) -> None:
    jobs = offline_app()
    ran: list[str] = []

    @jobs.job(name="work", retry=1)
    async def work(tag: str) -> None:
        ran.append(tag)
        if tag == "flaky" and current_job().attempt == 1:
            raise RuntimeError("once")

    with jobs.testing.fake() as testing:
        await work.enqueue("flaky")
        await work.enqueue_in(3600, "tomorrow")
        await testing.drain(include_retries=False)
        assert ran == ["flaky"]
        waiting = {r.args[0]: r for r in testing.enqueued()}
        assert waiting["flaky"].state == "retrying"
        assert waiting["tomorrow"].state == "scheduled"
        assert testing.status(waiting["flaky"].jid).state == "retrying"
        assert testing.status(waiting["flaky"].jid).error == "RuntimeError: once"
        await testing.drain()
        assert ran == ["flaky", "flaky"]
        await testing.drain(include_scheduled=True)
        assert ran == ["flaky", "flaky", "tomorrow"]
        assert testing.enqueued() == []


async def test_a_job_that_enqueues_itself_forever_stops_the_drain(
        offline_app: Callable[..., App]) -> None:
    jobs = offline_app()

    @jobs.job(name="again")
    async def again() -> None:
        await again.enqueue()

    with jobs.testing.fake() as testing:
        await again.enqueue()
        with pytest.raises(TooManyRuns, match="again x1"):
            await testing.drain(max_runs=25)
        assert len(testing.runs()) == 25


async def test_the_job_sees_its_context_and_the_server_middleware_wraps_it(
        offline_app: Callable[..., App]) -> None:
    jobs = offline_app()
    seen: list[Any] = []

    async def around(job: JobContext, call_next: RunNext) -> None:
        seen.append(("before", job.name))
        await call_next(job)
        seen.append(("after", job.name))

    jobs.add_server_middleware(around)

    @jobs.job(name="parent", queue="default")
    async def parent(n: int) -> None:
        job = current_job()
        seen.append((job.name, job.queue, job.attempt, job.payload["args"], job.jid))
        await child.enqueue(n + 1)

    @jobs.job(name="child")
    def child(n: int) -> None:  # a plain function, in a worker thread
        seen.append((current_job().name, n))
        child_of_child.enqueue_sync(n + 1)

    @jobs.job(name="child_of_child")
    def child_of_child(n: int) -> None:
        seen.append((current_job().name, n))

    with jobs.testing.fake() as testing:
        jid = await parent.enqueue(1)
        await testing.drain()

    assert seen == [("before", "parent"), ("parent", "default", 1, [1], jid),
                    ("after", "parent"), ("before", "child"), ("child", 2), ("after", "child"),
                    ("before", "child_of_child"), ("child_of_child", 3),
                    ("after", "child_of_child")]


async def test_expired_jobs_are_not_run(offline_app: Callable[..., App]) -> None:
    jobs = offline_app()
    ran: list[str] = []

    @jobs.job(name="work")
    async def work(tag: str) -> None:
        ran.append(tag)

    with jobs.testing.fake() as testing:
        late = await work.options(expires_in=0.05).enqueue("late")
        dropped = await work.options(expires_in=0.05, dead_on_expiry=False).enqueue("dropped")
        deadline = time.time() + 0.1
        await wait_until(lambda: time.time() > deadline, every=0.02)  # let them pass
        runs = await testing.drain()

    assert ran == []
    assert [(run.jid, run.outcome) for run in runs] == [(late, "expired"), (dropped, "expired")]
    assert isinstance(runs[0].error, Expired)
    assert testing.status(runs[0].jid).state == "dead"
    assert testing.status(runs[1].jid).state == "cancelled"


async def test_a_kept_result_is_in_the_run_and_the_status(
        offline_app: Callable[..., App]) -> None:
    jobs = offline_app()

    @jobs.job(name="compute", keep_result=60)
    async def compute(n: int) -> dict[str, int]:
        return {"double": n * 2}

    @jobs.job(name="bad_result", keep_result=60)
    async def bad_result() -> object:
        return object()

    with jobs.testing.fake() as testing:
        await compute.enqueue(21)
        await bad_result.enqueue()
        good, bad = await testing.drain()

    assert good.result == {"double": 42}
    assert testing.status(good.jid).result == {"double": 42}
    assert (bad.outcome, type(bad.error).__name__) == ("dead", "ResultNotJSON")


async def test_limiters_admit_unless_told_to_refuse(offline_app: Callable[..., App]) -> None:
    jobs = offline_app()
    payments = jobs.limiter("payments", concurrent=1)
    emails = jobs.limiter("emails", per_window=(1, 60))
    inside: list[str] = []

    @jobs.job(name="charge")
    async def charge(tag: str) -> None:
        async with payments, emails:
            inside.append(tag)

    with jobs.testing.fake() as testing:
        await charge.enqueue("a")
        await charge.enqueue("b")
        assert [run.outcome for run in await testing.drain()] == ["succeeded", "succeeded"]
        testing.refuse("payments")
        await charge.enqueue("c")
        (refused,) = await testing.drain(include_retries=False)
    assert inside == ["a", "b"]
    assert refused.outcome == "limited"
    assert isinstance(refused.error, type(None))  # a refusal is not a failure
    assert refused.entry is not None
    assert refused.entry["limited_count"] == 1
    assert refused.entry["error_class"] == OverLimit.__name__
    (waiting,) = testing.enqueued()
    assert waiting.state == "retrying"


async def test_failure_and_death_hooks_hear_drained_runs(
        offline_app: Callable[..., App]) -> None:
    jobs = offline_app()
    heard: list[Any] = []

    @jobs.on_failure
    async def failed(job: JobContext, error: BaseException) -> None:
        heard.append(("failure", job.name, job.attempt, str(error)))

    @jobs.on_death
    def died(death: Death) -> None:
        heard.append(("death", death.name, death.reason))

    @jobs.job(name="fails", retry=1)
    async def fails() -> None:
        raise RuntimeError("boom")

    with jobs.testing.fake() as testing:
        await fails.enqueue()
        await testing.drain()

    assert heard == [("failure", "fails", 1, "boom"), ("failure", "fails", 2, "boom"),
                     ("death", "fails", "RuntimeError")]


async def test_drain_needs_a_fake_block(offline_app: Callable[..., App]) -> None:
    jobs = offline_app()
    with pytest.raises(RuntimeError, match=r"fake\(\) block"):
        await jobs.testing.drain()
    with jobs.testing.inline(), pytest.raises(RuntimeError, match=r"fake\(\) block"):
        await jobs.testing.drain()
