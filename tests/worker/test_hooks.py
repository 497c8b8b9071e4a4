"""``@jobs.on_failure`` and ``@jobs.on_death`` in a live worker: who hears what, and that a
hook that raises or hangs never changes how a job is settled."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import App, Death, JobContext
from cogworker_async.redis.store import Store
from cogworker_async.worker.hooks import HOOK_THREADS, HookRunner, Hooks
from tests.waiting import wait_until
from tests.worker.test_recovery import DEAD, plant_dead, raw_job


class Boom(Exception):
    pass


class Poison(Exception):
    pass


async def test_failure_hooks_hear_every_failed_run_and_death_hooks_every_death(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(retry_base_delay=0.0, poll_interval=0.1)
    failures: list[tuple[str, int, str]] = []
    deaths: list[Death] = []

    @jobs.on_failure
    async def on_failure(job: JobContext, error: BaseException) -> None:
        failures.append((job.name, job.attempt, type(error).__name__))

    @jobs.on_death
    def on_death(death: Death) -> None:  # a plain function: run in a thread
        deaths.append(death)

    @jobs.job(name="flaky", retry=1)
    async def flaky() -> None:
        raise Boom("again")

    @jobs.job(name="discarded", discard_on=[Poison])
    async def discarded() -> None:
        raise Poison("no retries for this")

    @jobs.job(name="fine")
    async def fine() -> None:
        pass

    flaky_jid = await flaky.enqueue()
    discarded_jid = await discarded.enqueue()
    await fine.enqueue()
    await store.client.rpush(store.keys.queue("default"), b"{not json")
    await store.client.rpush(store.keys.queue("default"), raw_job("nobody.knows.me", 3))
    async with jobs.worker():
        await wait_until(lambda: len(deaths) == 4, timeout=10)
    assert sorted(failures) == [("discarded", 1, "Poison"), ("flaky", 1, "Boom"),
                                ("flaky", 2, "Boom"), ("nobody.knows.me", 1, "UnknownJob")]
    by_reason = {death.reason: death for death in deaths}
    assert set(by_reason) == {"Boom", "Poison", "UnknownJob", "UnparseablePayload"}
    assert by_reason["Boom"].jid == flaky_jid
    assert by_reason["Boom"].entry["retry_count"] == 1
    assert by_reason["Poison"].jid == discarded_jid
    assert by_reason["Poison"].name == "discarded"
    assert by_reason["UnparseablePayload"].jid is None
    assert await store.client.zcard(store.keys.dead("default")) == 4


async def test_a_hook_that_raises_or_hangs_changes_nothing_about_the_job(
    make_app: Callable[..., App], store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = make_app()
    released = threading.Event()
    after: list[int] = []

    @jobs.on_failure
    async def broken(job: JobContext, error: BaseException) -> None:
        raise RuntimeError("the hook itself is broken")

    @jobs.on_death
    def stuck(death: Death) -> None:
        released.wait(30)  # hangs until the test lets it go

    @jobs.job(name="doomed", retry=False)
    async def doomed() -> None:
        raise Boom("dead at once")

    @jobs.job(name="next")
    async def next_job(n: int) -> None:
        after.append(n)

    caplog.set_level(logging.ERROR, logger="cogworker_async.worker.hooks")
    try:
        await doomed.enqueue()
        async with jobs.worker():
            # Filed in dead while the death hook still hangs, and the hook's error is
            # only logged.
            await wait_until(lambda: store.client.zcard(store.keys.dead("default")),
                             timeout=5)
            await wait_until(lambda: "the hook itself is broken" in caplog.text, timeout=5)
            for n in range(20):
                await next_job.enqueue(n)
            await wait_until(lambda: len(after) == 20, timeout=5)
            assert not released.is_set()
            released.set()
    finally:
        released.set()
    [entry] = [json.loads(e) for e in await store.client.zrange(store.keys.dead("default"),
                                                                  0, -1)]
    assert entry["error_class"] == "Boom"
    assert await store.client.llen(store.keys.queue("default")) == 0


async def test_a_process_died_burial_is_a_death(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(max_orphanings=2)
    deaths: list[Death] = []
    jobs.on_death(deaths.append)
    await store.client.set(store.keys.orphanings("default", "j7"), 2)
    await plant_dead(store, {"default": [raw_job("poison", 7)]})
    async with jobs.worker():
        await wait_until(lambda: bool(deaths), timeout=5)
    [death] = deaths
    assert (death.jid, death.name, death.reason) == ("j7", "poison", "ProcessDied")
    assert death.entry["orphaned_from"] == DEAD


async def test_a_hook_over_its_timeout_is_abandoned_and_logged(
    caplog: pytest.LogCaptureFixture
) -> None:
    runner = HookRunner(Hooks(), timeout=0.2)
    calls: list[str] = []

    async def slow(*_: Any) -> None:
        await anyio.sleep(30)

    async def quick(*_: Any) -> None:
        calls.append("quick")

    with anyio.fail_after(5):
        await runner.call(slow, ())
        await runner.call(quick, ())
    assert calls == ["quick"]
    assert "ran over" in caplog.text


async def test_calls_beyond_the_buffer_are_dropped_and_counted() -> None:
    deaths: list[Death] = []
    runner = HookRunner(Hooks(on_death=[deaths.append]), buffer=3)
    death = Death(jid="j", name="n", queue="default", reason="Boom", message="", entry={})
    for _ in range(5):
        runner.died(death)
    assert runner.dropped == 2
    async with anyio.create_task_group() as group:
        group.start_soon(runner.run)  # drains the three it kept, then waits for more
        await wait_until(lambda: len(deaths) == 3, timeout=5)
        group.cancel_scope.cancel()
    assert len(deaths) == 3


def test_a_hook_must_be_callable(make_app: Callable[..., App]) -> None:
    jobs = make_app()
    with pytest.raises(TypeError, match="on_failure takes a function"):
        jobs.on_failure("not a function")  # type: ignore[arg-type]


async def test_a_hook_calling_sys_exit_does_not_end_the_worker(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    after: list[int] = []

    @jobs.on_death
    def leave(death: Death) -> None:
        raise SystemExit(3)

    @jobs.job(name="doomed", retry=False)
    async def doomed() -> None:
        raise Boom("dead at once")

    @jobs.job(name="next")
    async def next_job(n: int) -> None:
        after.append(n)

    await doomed.enqueue()
    async with jobs.worker() as worker:
        await wait_until(lambda: store.client.zcard(store.keys.dead("default")), timeout=5)
        await next_job.enqueue(1)
        await wait_until(lambda: after == [1], timeout=5)
        assert not worker.stopping


async def test_a_hook_that_changes_what_it_is_given_changes_nothing_filed(
    make_app: Callable[..., App], store: Store
) -> None:
    """Hooks get copies: the payload a hook sees is also what the retry entry is built
    from (and re-encoded at each settle attempt)."""
    jobs = make_app(retry_base_delay=3600.0)  # the retry waits in the retry set
    seen: list[str] = []

    @jobs.on_failure
    def scrub(job: JobContext, error: BaseException) -> None:
        job.payload["kwargs"]["password"] = "***"
        job.payload["args"].append("injected")
        seen.append(job.jid)

    @jobs.job(name="login")
    async def login(user: str, *, password: str) -> None:
        raise Boom("try again later")

    jid = await login.enqueue("ann", password="s3cret")
    async with jobs.worker():
        await wait_until(lambda: store.client.zcard(store.keys.retry("default")), timeout=10)
        await wait_until(lambda: seen == [jid], timeout=10)
    [entry] = [json.loads(e) for e in await store.client.zrange(store.keys.retry("default"),
                                                                  0, -1)]
    assert entry["args"] == ["ann"]
    assert entry["kwargs"] == {"password": "s3cret"}


async def test_hung_plain_hooks_hold_at_most_a_few_threads() -> None:
    """A plain hook abandoned at its timeout runs on in its thread: past HOOK_THREADS
    such threads, further plain calls are dropped rather than a thread leaked per call."""
    release = threading.Event()
    started: list[int] = []

    def hang(death: Death) -> None:
        started.append(1)
        release.wait(30)

    runner = HookRunner(Hooks(on_death=[hang]), timeout=0.1)
    before = threading.active_count()
    death = Death(jid="j", name="n", queue="default", reason="Boom", message="", entry={})
    try:
        with anyio.fail_after(10):
            for _ in range(HOOK_THREADS * 3):
                await runner.call(hang, (death,))
        assert len(started) <= HOOK_THREADS
        assert threading.active_count() - before <= HOOK_THREADS
        assert runner.dropped >= HOOK_THREADS * 2
    finally:
        release.set()


async def test_a_graceful_stop_lets_the_last_failures_reach_their_hooks(
    make_app: Callable[..., App], store: Store
) -> None:
    """A deploy right after a job failed: the worker is stopped as soon as the job is
    dead, while its failure hook is still working; the stop waits for the hook."""
    jobs = make_app()
    heard: list[str] = []
    hook_began = anyio.Event()

    @jobs.on_failure
    async def report(job: JobContext, error: BaseException) -> None:
        hook_began.set()
        await anyio.sleep(0.5)  # a slow error tracker
        heard.append(str(error))

    @jobs.job(name="doomed", retry=False)
    async def doomed() -> None:
        raise Boom("reported even at a stop")

    async with jobs.worker():
        await doomed.enqueue()
        await wait_until(lambda: store.client.zcard(store.keys.dead("default")), timeout=5)
        with anyio.fail_after(5):
            await hook_began.wait()
    assert heard == ["reported even at a stop"]
