"""Limiters through real workers and callers (on one Redis and on a cluster): a
concurrent limiter holds across the slots of a worker, a refused job is rescheduled —
not failed, not retried — and fails normally past its reschedules; outside a worker
``async with`` works on its own and raises ``OverLimit``; window and bucket limiters
admit at their rate."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest
from anyio.abc import TaskStatus

from cogworker_async import App, OverLimit, current_job
from cogworker_async.jobs.context import JobContext
from cogworker_async.limits.limiter import Limiter
from cogworker_async.redis.limits import limiter_usage
from tests.waiting import wait_until

TIMEOUT = 30.0
HOLD = 0.05


class Gauge:
    """How many are inside a limiter at once (counted in the job, and sampled in Redis
    from the holders zset), the most ever seen, and what each run said."""

    def __init__(self) -> None:
        self.now = self.most = self.sampled = 0
        self.done: list[str] = []
        self.reschedules: dict[str, int] = {}

    async def hold(self, tag: str, seconds: float) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await anyio.sleep(seconds)
        finally:
            self.now -= 1
        self.done.append(tag)
        self.reschedules[tag] = int(current_job().payload.get("limited_count") or 0)

    async def sample(self, app: App, name: str) -> None:
        key = app._store().keys.limiter(name, "holders")
        while True:
            self.sampled = max(self.sampled, int(await app._store().client.zcard(key)))
            await anyio.sleep(0.005)


async def stats(app: App) -> tuple[int, int]:
    """(processed, failed), as the workers flushed them."""
    store = app._store()
    processed, failed = await store.client.mget([store.keys.stats_processed,
                                                 store.keys.stats_failed])
    return int(processed or 0), int(failed or 0)


async def test_a_concurrent_limiter_holds_across_the_slots_of_a_worker(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app(concurrency=10)
    payments = jobs.limiter("payments", concurrent=3)
    gauge = Gauge()

    @jobs.job()
    async def charge(tag: str) -> None:
        async with payments:
            await gauge.hold(tag, HOLD)

    async with anyio.create_task_group() as tg:
        tg.start_soon(gauge.sample, jobs, "payments")
        async with jobs.worker():
            await charge.enqueue_many([((f"c{i}",), {}) for i in range(30)])
            await wait_until(lambda: len(gauge.done) == 30, timeout=TIMEOUT)
        tg.cancel_scope.cancel()

    assert sorted(gauge.done) == sorted(f"c{i}" for i in range(30))
    assert gauge.most == 3, gauge.most  # never more, and a limit, not a single lane
    assert gauge.sampled <= 3
    assert sum(gauge.reschedules.values()) > 0, "10 slots for 3 places: some were refused"
    processed, failed = await stats(jobs)
    assert failed == 0
    assert processed == 30 + sum(gauge.reschedules.values())  # a refused run is a run
    usage = await limiter_usage(jobs._store())
    assert (usage["payments"].kind, usage["payments"].capacity) == ("concurrent", 3)
    assert usage["payments"].in_use == 0  # every slot given back


async def test_a_refused_job_waits_as_retrying_and_keeps_its_jid(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()
    single = jobs.limiter("single", concurrent=1)
    ran: list[JobContext] = []

    @jobs.job(retry=0)
    async def work() -> None:
        async with single:
            ran.append(current_job())

    async with jobs.worker():
        async with single:  # held by the test, outside any worker
            jid = await work.enqueue()
            assert jid is not None

            async def waiting() -> bool:
                status = await jobs.status(jid)
                return status.state == "retrying" and \
                    (status.error or "").startswith("OverLimit")
            await wait_until(waiting, timeout=TIMEOUT)
        await wait_until(lambda: bool(ran), timeout=TIMEOUT)
        await wait_until(lambda: _state(jobs, jid, "succeeded"), timeout=TIMEOUT)

    [context] = ran
    assert context.jid == jid
    assert context.attempt == 1  # no retry was counted (it has none: retry=0)
    assert int(context.payload["limited_count"]) >= 1
    assert (await stats(jobs))[1] == 0


async def _state(app: App, jid: str, state: str) -> bool:
    return (await app.status(jid)).state == state


async def test_past_its_reschedules_a_refused_job_fails_normally(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app(max_limit_reschedules=2)
    single = jobs.limiter("single", concurrent=1)
    failures: list[BaseException] = []
    runs: list[int] = []
    jobs.on_failure(lambda job, error: failures.append(error))

    @jobs.job(retry=0)
    async def work() -> None:
        runs.append(int(current_job().payload.get("limited_count") or 0))
        async with single:
            pass

    async with jobs.worker():
        async with single:
            jid = await work.enqueue()
            assert jid is not None
            await wait_until(lambda: _state(jobs, jid, "dead"), timeout=TIMEOUT)
            # The hook hears of it from its own task, after the settle.
            await wait_until(lambda: bool(failures), timeout=TIMEOUT)

    assert runs == [0, 1, 2]  # two reschedules, then a failure like any other
    assert len(failures) == 1
    assert isinstance(failures[0], OverLimit)
    status = await jobs.status(jid)
    assert (status.error or "").startswith("OverLimit")
    assert await stats(jobs) == (3, 1)


async def test_outside_a_worker_a_limiter_holds_and_refuses_the_caller(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()
    api = jobs.limiter("api", concurrent=2)
    # The same limiter in another App of the namespace (another process, for Redis).
    patient = make_app().limiter("api", concurrent=2, wait=5)
    leave, entered = anyio.Event(), anyio.Event()

    async def hold(*, task_status: TaskStatus[None]) -> None:
        async with api:
            task_status.started()
            await leave.wait()

    async def third() -> None:
        async with patient:
            entered.set()

    async with anyio.create_task_group() as tg:
        await tg.start(hold)
        await tg.start(hold)
        with pytest.raises(OverLimit, match="limiter 'api' is over its limit") as refused:
            async with api:
                pytest.fail("a third holder")
        assert refused.value.retry_after is None
        tg.start_soon(third)
        with anyio.move_on_after(0.3):  # it waits: nothing may enter while two hold
            await entered.wait()
        assert not entered.is_set()
        leave.set()  # the two leave: the waiting one enters
        with anyio.fail_after(TIMEOUT):
            await entered.wait()
    store = jobs._store()
    assert await store.client.zcard(store.keys.limiter("api", "holders")) == 0


async def _admitted_over(limiter: Limiter, seconds: float) -> int:
    """Acquisitions the limiter admits to one caller trying without a break (waiting
    between tries as the limiter says) for ``seconds`` from a whole second of the clock."""
    start = int(time.time()) + 1  # a window (of 1 s) of its own
    await anyio.sleep(start - time.time() + 0.002)
    # From the whole second, not from the wake-up: a sleep that overran (a loaded machine)
    # would otherwise end in a fourth window and count its acquisitions too.
    end = start + seconds
    admitted = 0
    while time.time() < end:
        try:
            async with limiter:
                if time.time() < end:
                    admitted += 1
        except OverLimit:
            continue
    return admitted


@pytest.mark.parametrize(("kind", "spec", "expected"), [
    ("per_window", (5, 1), 15),  # 3 windows of 5
    # A full bucket of 5, then a token every 0.2 s: 14 more before the 3 s are over (the
    # 15th is due at the very end).
    ("bucket", (5, 1), 19),
])
async def test_window_and_bucket_limiters_admit_at_their_rate(
    make_app: Callable[..., App], kind: str, spec: tuple[int, float], expected: int,
) -> None:
    app = make_app()
    limiter = app.limiter(kind, per_window=spec, wait=2) if kind == "per_window" else \
        app.limiter(kind, bucket=spec, wait=2)

    admitted = await _admitted_over(limiter, 3.0)

    assert expected - 1 <= admitted <= expected + 1, admitted


async def test_a_worker_lists_its_apps_limiters_with_their_use(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()
    payments = jobs.limiter("payments", concurrent=2)
    emails = jobs.limiter("emails", per_window=(100, 60))
    jobs.limiter("search", bucket=(10, 1))
    async with jobs.worker():
        pass

    async with emails, payments, payments:
        with pytest.raises(OverLimit):
            async with payments:
                pass
        usage = await limiter_usage(jobs._store())

    assert sorted(usage) == ["emails", "payments", "search"]
    assert (usage["emails"].kind, usage["emails"].capacity, usage["emails"].seconds,
            usage["emails"].in_use) == ("window", 100, 60.0, 1)
    assert (usage["payments"].kind, usage["payments"].capacity, usage["payments"].in_use,
            usage["payments"].over_recent) == ("concurrent", 2, 2, 1)
    assert (usage["search"].kind, usage["search"].in_use, usage["search"].over_recent) == (
        "bucket", 0, 0)
    assert await limiter_usage(jobs._store(), ["search", "unknown"]) == {
        "search": usage["search"]}
