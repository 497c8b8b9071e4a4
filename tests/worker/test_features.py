"""Unique jobs, timeouts, retry control, job context and middleware, in a live worker."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import App, JobContext, Retry, current_job
from cogworker_async.middleware import Enqueue, EnqueueNext, RunNext
from cogworker_async.redis.store import Store
from tests.waiting import wait_until


async def dead_entries(store: Store) -> list[dict[str, Any]]:
    entries = await store.client.zrange(store.keys.dead("default"), 0, -1)
    return [json.loads(e) for e in entries]


async def test_a_unique_job_enqueued_100_times_by_10_clients_is_one_job(
    make_app: Callable[..., App], store: Store
) -> None:
    clients = [make_app() for _ in range(10)]
    handles = []
    for app in clients:
        @app.job(name="report", unique=True)
        async def report(day: str) -> None: ...

        handles.append(report)
    jids: list[str | None] = []

    async def enqueue_ten(handle: Any) -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(10):
                async def one() -> None:
                    jids.append(await handle.enqueue("2030-01-01"))
                tg.start_soon(one)

    async with anyio.create_task_group() as tg:
        for handle in handles:
            tg.start_soon(enqueue_ten, handle)
    assert len(jids) == 100
    assert len([j for j in jids if j is not None]) == 1
    assert await store.client.llen(store.keys.queue("default")) == 1
    # Other arguments are another job.
    assert await handles[0].enqueue("2030-01-02") is not None


async def test_a_unique_lock_is_released_when_the_job_lands_in_dead(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    runs: list[int] = []

    @jobs.job(unique=True, retry=False)
    async def fragile(n: int) -> None:
        runs.append(n)
        raise ValueError("no")

    assert await fragile.enqueue(1) is not None
    assert await fragile.enqueue(1) is None  # locked while waiting
    assert not await _no_unique_locks(store)  # the pattern finds the lock
    async with jobs.worker():
        await wait_until(lambda: store.client.zcard(store.keys.dead("default")))
        await wait_until(lambda: _no_unique_locks(store))
    assert await fragile.enqueue(1) is not None  # free again


async def _no_unique_locks(store: Store) -> bool:
    """No unique lock in any queue's slot (the pattern matches every queue and digest)."""
    pattern = store.keys.unique("*", "*")
    return [k async for k in store.client.scan_iter(match=pattern)] == []


async def test_until_executed_keeps_the_lock_over_a_retry_then_releases_on_success(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    attempts: list[int] = []

    @jobs.job(unique="until_executed", retry=3)
    async def flaky() -> None:
        attempts.append(current_job().attempt)
        if len(attempts) == 1:
            raise Retry(in_=0.5)

    await flaky.enqueue()
    async with jobs.worker():
        await wait_until(lambda: len(attempts) == 1)
        await wait_until(lambda: store.client.zcard(store.keys.retry("default")))
        assert await flaky.enqueue() is None  # still locked while waiting to retry
        await wait_until(lambda: len(attempts) == 2, timeout=5)
        await wait_until(lambda: _no_unique_locks(store))
    assert attempts == [1, 2]


async def test_until_started_frees_the_lock_as_the_job_starts(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    started = anyio.Event()
    release = anyio.Event()

    @jobs.job(unique="until_started")
    async def sync_feed() -> None:
        started.set()
        await release.wait()

    assert await sync_feed.enqueue() is not None
    async with jobs.worker():
        await started.wait()
        await wait_until(lambda: _no_unique_locks(store))
        assert await sync_feed.enqueue() is not None  # a new one may wait while it runs
        release.set()


async def test_a_timeout_that_fires_is_retried_then_dead(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    runs: list[int] = []

    @jobs.job(timeout=0.1, retry=1)
    async def slow() -> None:
        runs.append(1)
        await anyio.sleep(5)

    await slow.enqueue()
    async with jobs.worker():
        await wait_until(lambda: store.client.zcard(store.keys.dead("default")), timeout=5)
    [entry] = await dead_entries(store)
    assert entry["error_class"] == "JobTimeout"
    assert len(runs) == 2


async def test_a_plain_function_that_times_out_is_reported_and_holds_its_slot(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    proceed = threading.Event()
    other_ran = anyio.Event()

    @jobs.job(timeout=0.1, retry=False)
    def stuck() -> None:
        assert proceed.wait(10)

    @jobs.job()
    async def other() -> None:
        other_ran.set()

    await stuck.enqueue()
    await other.enqueue()
    async with jobs.worker(concurrency=1):
        await wait_until(lambda: store.client.zcard(store.keys.dead("default")), timeout=5)
        [entry] = await dead_entries(store)
        assert entry["error_class"] == "JobTimeout"
        # The only slot is still held by the thread: the other job waits.
        with anyio.move_on_after(0.5):
            await other_ran.wait()
        assert not other_ran.is_set()
        proceed.set()
        with anyio.fail_after(5):
            await other_ran.wait()


async def test_the_job_context(make_app: Callable[..., App], store: Store) -> None:
    jobs = make_app()
    seen: list[JobContext] = []
    recovered: list[bool] = []

    @jobs.job(queue="default", retry=2)
    async def aware(n: int) -> None:
        ctx = current_job()
        seen.append(ctx)
        recovered.append(await ctx.was_recovered())
        if ctx.attempt == 1:
            raise Retry(in_=0)

    @jobs.job()
    def aware_sync() -> None:
        seen.append(current_job())

    jid = await aware.enqueue(1)
    assert jid is not None
    await store.client.set(store.keys.orphanings("default", jid), 1)
    await aware_sync.enqueue()
    async with jobs.worker():
        await wait_until(lambda: len(seen) == 3, timeout=5)
    by_name = sorted(seen, key=lambda c: (c.name, c.attempt))
    assert [c.attempt for c in by_name if c.name.endswith("aware")] == [1, 2]
    first = by_name[0]
    assert (first.jid, first.queue) == (jid, "default")
    assert first.enqueued_at is not None
    assert first.enqueued_at <= time.time()
    assert recovered == [True, True]
    with pytest.raises(LookupError):
        current_job()


async def test_retry_control_from_the_job(make_app: Callable[..., App], store: Store) -> None:
    jobs = make_app(retry_base_delay=1000.0)
    asked: list[tuple[int, str]] = []

    def retry_in(attempt: int, error: BaseException) -> float:
        asked.append((attempt, type(error).__name__))
        return 0.05

    @jobs.job(retry=1, retry_in=retry_in)
    async def hooked() -> None:
        raise KeyError("x")

    @jobs.job(retry=10, discard_on=(PermissionError,))
    async def forbidden() -> None:
        raise PermissionError("never retry this")

    await hooked.enqueue()
    await forbidden.enqueue()
    async with jobs.worker():
        await wait_until(lambda: _zcard_is(store, store.keys.dead("default"), 2), timeout=5)
    assert asked == [(1, "KeyError")]
    classes = sorted(e["error_class"] for e in await dead_entries(store))
    assert classes == ["KeyError", "PermissionError"]


async def test_raise_retry_sets_the_delay(make_app: Callable[..., App], store: Store) -> None:
    jobs = make_app()

    @jobs.job(retry=3)
    async def later() -> None:
        raise Retry(in_=120)

    await later.enqueue()
    async with jobs.worker():
        await wait_until(lambda: store.client.zcard(store.keys.retry("default")))
    [(_, score)] = await store.client.zrange(store.keys.retry("default"), 0, -1,
                                             withscores=True)
    assert 110 < score - time.time() <= 121


async def test_middleware_around_enqueue_and_run(make_app: Callable[..., App]) -> None:
    jobs = make_app()
    calls: list[str] = []

    async def tenant(enqueue: Enqueue, call_next: EnqueueNext) -> str | None:
        if enqueue.payload["args"] == [0]:
            return None  # refused
        enqueue.payload["tenant"] = "acme"
        return await call_next(enqueue)

    async def around(job: JobContext, call_next: RunNext) -> None:
        calls.append(f"before {job.payload.get('tenant')}")
        try:
            await call_next(job)
        except ValueError:
            calls.append("saw the error")
            raise
        calls.append("after")

    jobs.add_client_middleware(tenant)
    jobs.add_server_middleware(around)

    @jobs.job(retry=False)
    async def work(n: int) -> None:
        calls.append(f"run {n}")
        if n == 2:
            raise ValueError("two")

    assert await work.enqueue(0) is None
    assert await work.enqueue(1) is not None
    async with jobs.worker(concurrency=1):
        await wait_until(lambda: calls[-1:] == ["after"])
        await work.enqueue(2)
        await wait_until(lambda: calls[-1:] == ["saw the error"])
    assert calls == ["before acme", "run 1", "after", "before acme", "run 2", "saw the error"]


async def _zcard_is(store: Store, key: str, n: int) -> bool:
    return int(await store.client.zcard(key)) == n


