"""What an arq user writes, through a real worker: durations as ``timedelta`` wherever a
duration is taken, a negative delay that means "now", and ``keep_result=0`` for "keep
no result" (docs/migration/arq.md). Bad durations are still refused at the call.
``run_at_startup`` runs a periodic job once when the workers start."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from functools import partial
from typing import Any

import anyio
import pytest
import redis.exceptions

from cogworker_async import App, Retry, RetryPolicy, current_job
from cogworker_async.admin import Inspector
from cogworker_async.jobs.dedup import Debounce, Throttle
from cogworker_async.jobs.periodic import STARTUP_WINDOW
from cogworker_async.jobs.times import seconds_of
from cogworker_async.jobs.unique import Unique
from cogworker_async.redis.errors import Unavailable
from cogworker_async.redis.store import Store
from cogworker_async.worker.cron import CronTicker, periodic_job
from tests.waiting import wait_until

TIMEOUT = 20.0


async def _ended(jobs: App, jid: str | None) -> str:
    """The state ``jid`` ends in (waits, bounded)."""
    assert jid is not None

    async def ended() -> bool:
        return (await jobs.status(jid)).state in ("succeeded", "dead", "cancelled")
    await wait_until(ended, timeout=TIMEOUT)
    return (await jobs.status(jid)).state


async def test_timedelta_durations_run_as_seconds(make_app: Callable[..., App]) -> None:
    jobs = make_app()
    tries: list[int] = []

    @jobs.job(timeout=timedelta(milliseconds=300), retry=False,
              keep_result=timedelta(minutes=5))
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "done"

    @jobs.job(keep_result=timedelta(minutes=5))
    async def flaky() -> int:
        tries.append(current_job().attempt)
        if len(tries) == 1:
            raise Retry(in_=timedelta(milliseconds=100))
        return len(tries)

    @jobs.job(retry=RetryPolicy(max=2, delay=lambda attempt, error: timedelta(
        milliseconds=50)), keep_result=60)
    async def asks_with_retry_in() -> int:
        if current_job().attempt == 1:
            raise RuntimeError("first run fails")
        return current_job().attempt

    quick = await slow.enqueue(0)
    stuck = await slow.enqueue(5)
    retried = await flaky.enqueue()
    asked = await asks_with_retry_in.enqueue()
    async with jobs.worker():
        assert await jobs.result(quick, timeout=TIMEOUT) == "done"
        assert await _ended(jobs, stuck) == "dead"
        assert await jobs.result(retried, timeout=TIMEOUT) == 2
        assert await jobs.result(asked, timeout=TIMEOUT) == 2
    error = (await jobs.status(stuck)).error
    assert error is not None
    assert error.startswith("JobTimeout")
    assert tries == [1, 2]


def test_every_duration_option_takes_a_timedelta(make_app: Callable[..., App]) -> None:
    jobs = make_app()

    @jobs.job(unique=True, unique_ttl=timedelta(hours=2), timeout=timedelta(seconds=90),
              keep_result=timedelta(days=1))
    async def report() -> None: ...

    options = report.options(expires_in=timedelta(minutes=1)).job_options
    assert (options.unique_ttl, options.timeout, options.keep_result, options.expires_in) \
        == (7200.0, 90.0, 86400.0, 60.0)
    assert report.options(throttle=timedelta(seconds=5), unique=False,
                          ).job_options.throttle == 5.0
    assert Unique(ttl=timedelta(minutes=1)).ttl == 60.0
    assert Throttle(timedelta(seconds=3)).seconds == 3.0
    assert Debounce(timedelta(milliseconds=500)).seconds == 0.5
    assert RetryPolicy(delay=timedelta(seconds=7)).delay == 7.0
    assert Retry(in_=timedelta(minutes=2)).delay == 120.0


async def test_any_real_number_is_seconds(make_app: Callable[..., App]) -> None:
    # What float() read before durations took a timedelta: Decimal, Fraction (and
    # numpy's numbers, which are numbers.Real too) must still be seconds in a job.
    jobs = make_app()
    tries: list[int] = []

    @jobs.job(keep_result=60)
    async def asks_with_retry() -> int:
        tries.append(current_job().attempt)
        if len(tries) == 1:
            raise Retry(in_=Decimal("0.1"))
        return len(tries)

    @jobs.job(retry=RetryPolicy(max=2, delay=lambda attempt, error: Fraction(1, 20)),
              keep_result=60)
    async def asks_with_retry_in() -> int:
        if current_job().attempt == 1:
            raise RuntimeError("first run fails")
        return current_job().attempt

    assert (Retry(in_=Decimal("5")).delay, Retry(in_=Fraction(1, 2)).delay) == (5.0, 0.5)
    assert RetryPolicy(delay=Decimal("1.5")).delay == 1.5
    assert seconds_of(Fraction(3, 4)) == 0.75
    options = asks_with_retry.options(timeout=Decimal("2"), keep_result=Fraction(3, 2),
                                      expires_in=Decimal(60)).job_options
    assert (options.timeout, options.keep_result, options.expires_in) == (2.0, 1.5, 60.0)
    assert (Unique(ttl=Fraction(1, 2)).ttl, Throttle(Decimal(2)).seconds,
            Debounce(Fraction(1, 4)).seconds) == (0.5, 2.0, 0.25)
    retried, asked = await asks_with_retry.enqueue(), await asks_with_retry_in.enqueue()
    async with jobs.worker():
        assert await jobs.result(retried, timeout=TIMEOUT) == 2
        assert await jobs.result(asked, timeout=TIMEOUT) == 2


def test_bad_durations_are_refused_at_the_call(make_app: Callable[..., App]) -> None:
    jobs = make_app()
    with pytest.raises(TypeError, match="timeout must be seconds or a timedelta, not bool"):
        jobs.job(timeout=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
        jobs.job(timeout=timedelta(seconds=-1))
    with pytest.raises(ValueError, match="keep_result must be seconds > 0"):
        jobs.job(keep_result=-5)
    with pytest.raises(TypeError, match=r"Retry\(in_=\) takes seconds or a timedelta"):
        Retry(in_=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl must be seconds > 0"):
        Unique(ttl=timedelta(0))


async def test_a_negative_delay_runs_now(make_app: Callable[..., App]) -> None:
    jobs = make_app()

    @jobs.job(keep_result=60)
    async def echo(tag: str) -> str:
        return tag

    late = await echo.enqueue_in(-2, "late")
    later = await echo.enqueue_in(timedelta(seconds=-30), "later")
    assert late is not None
    assert later is not None
    assert (await jobs.status(late)).state == "queued"  # not scheduled: due now
    with pytest.raises(ValueError, match="a delay must be a finite number"):
        await echo.enqueue_in(float("nan"), "never")
    async with jobs.worker():
        assert await jobs.result(late, timeout=TIMEOUT) == "late"
        assert await jobs.result(later, timeout=TIMEOUT) == "later"


async def test_keep_result_zero_keeps_no_result(make_app: Callable[..., App]) -> None:
    jobs = make_app()

    @jobs.job(keep_result=0)
    async def answer() -> int:
        return 42

    @jobs.job(keep_result=3600)
    async def kept() -> int:
        return 7

    assert answer.job_options.keep_result is None
    none = await answer.enqueue()
    overridden = await kept.options(keep_result=0).enqueue()
    still = await kept.enqueue()
    async with jobs.worker():
        assert await _ended(jobs, none) == "succeeded"
        assert await _ended(jobs, overridden) == "succeeded"
        assert await jobs.result(still, timeout=TIMEOUT) == 7
    assert await jobs.result(none, timeout=1) is None
    assert await jobs.result(overridden, timeout=1) is None


async def test_run_at_startup_runs_once_when_the_workers_start(
    make_app: Callable[..., App], store: Store,
) -> None:
    runs: list[int] = []
    apps = [make_app() for _ in range(3)]
    for jobs in apps:
        @jobs.periodic("0 0 1 1 *", name="warm_cache", run_at_startup=True)  # ticks yearly
        async def warm_cache() -> None:
            runs.append(current_job().attempt)

    # Three processes starting together: one run, not three.
    tickers = [CronTicker(store, list(jobs.periodics.values()),
                          partial(periodic_job, jobs.registry)) for jobs in apps]
    now = time.time()
    enqueued = [await ticker.run_at_startup(now) for ticker in tickers]
    assert sorted(enqueued) == [0, 0, 1]
    assert (await Inspector(apps[0]).queue("default").info()).size == 1

    # A real worker runs it; a start after the window (its lock gone) enqueues again.
    async with apps[0].worker():
        await wait_until(lambda: runs == [1], timeout=TIMEOUT)
    await store.client.delete(store.keys.cron_startup("default", "warm_cache"))
    async with apps[1].worker():
        await wait_until(lambda: runs == [1, 1], timeout=TIMEOUT)
    with pytest.raises(TypeError, match="run_at_startup must be True or False"):
        apps[2].periodic("* * * * *", name="other", run_at_startup="yes")(  # type: ignore[arg-type]
            _no_arguments)


async def _no_arguments() -> None: ...


def _startup_app(make_app: Callable[..., App], *names: str,
                 runs: list[str] | None = None) -> App:
    """An app whose periodic jobs ``names`` run at startup (and put their jid in ``runs``)."""
    jobs = make_app()
    for name in names:
        @jobs.periodic("0 0 1 1 *", name=name, run_at_startup=True)  # ticks yearly
        async def warm() -> None:
            if runs is not None:
                runs.append(current_job().jid)
    return jobs


def _ticker(store: Store, jobs: App) -> CronTicker:
    return CronTicker(store, list(jobs.periodics.values()), partial(periodic_job, jobs.registry))


async def _queued_names(jobs: App) -> list[str]:
    return sorted(job.name for job in (await Inspector(jobs).queue("default").page()).items)


async def test_run_at_startup_retried_after_a_failed_push_runs_each_once(
    make_app: Callable[..., App], store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = _startup_app(make_app, "a_first", "b_second")
    real = store.enqueue
    calls: list[int] = []

    async def blip(*args: Any, **kwargs: Any) -> int:
        # Fault injection on our own call, not Redis' behaviour: the first push goes
        # through and its reply is lost; the second fails outright (a Redis blip).
        calls.append(1)
        if len(calls) == 1:
            await real(*args, **kwargs)
            raise redis.exceptions.ConnectionError("reply lost")
        if len(calls) == 2:
            raise redis.exceptions.ConnectionError("connection reset")
        return await real(*args, **kwargs)

    monkeypatch.setattr(store, "enqueue", blip)
    ticker = _ticker(store, jobs)
    with pytest.raises(Unavailable):
        await ticker.run_at_startup(time.time())
    with pytest.raises(Unavailable):  # a_first's retry: refused; b_second's push fails
        await ticker.run_at_startup(time.time())
    assert await ticker.run_at_startup(time.time()) == 1
    assert await ticker.run_at_startup(time.time()) == 0
    assert await _queued_names(jobs) == ["a_first", "b_second"]


async def test_run_at_startup_of_a_holder_that_died_before_its_push_still_runs(
    make_app: Callable[..., App], store: Store,
) -> None:
    runs: list[str] = []
    jobs = _startup_app(make_app, "warm_cache", runs=runs)
    # A process took the startup lock and died before it enqueued the run.
    assert await store.take_lock(store.keys.cron_startup("default", "warm_cache"), "gone",
                                 STARTUP_WINDOW)
    assert await _ticker(store, jobs).run_at_startup(time.time()) == 1
    assert await _ticker(store, jobs).run_at_startup(time.time()) == 0
    assert await _queued_names(jobs) == ["warm_cache"]
    async with jobs.worker():
        await wait_until(lambda: runs == ["warm_cache:startup:gone"], timeout=TIMEOUT)


async def test_run_at_startup_of_tickers_starting_at_once_runs_once(
    make_app: Callable[..., App], store: Store,
) -> None:
    apps = [_startup_app(make_app, "warm_cache") for _ in range(4)]
    enqueued: list[int] = []

    async def start(jobs: App) -> None:
        enqueued.append(await _ticker(store, jobs).run_at_startup(time.time()))
    async with anyio.create_task_group() as tg:
        for jobs in apps:
            tg.start_soon(start, jobs)
    assert sorted(enqueued) == [0, 0, 0, 1]
    assert await _queued_names(apps[0]) == ["warm_cache"]
