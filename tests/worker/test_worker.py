"""A worker in this process, on the test server: jobs run, fail, wait and stop as promised."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import App, current_job
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.waiting import wait_until


async def lengths(store: Store, *keys: str) -> list[int]:
    out = []
    for key in keys:
        kind = (await store.client.type(key)).decode()
        size = {"list": store.client.llen, "zset": store.client.zcard}.get(kind)
        out.append(int(await size(key)) if size else 0)
    return out


async def in_progress_total(store: Store, keys: Keys) -> int:
    """Entries on every in-progress list of the namespace (every queue, every process)."""
    total = 0
    async for key in store.client.scan_iter(match=keys.in_progress_pattern):
        total += int(await store.client.llen(key))
    return total


async def test_jobs_run_with_their_arguments(make_app: Callable[..., App], store: Store) -> None:
    jobs = make_app()
    seen: list[tuple[int, str]] = []

    @jobs.job()
    async def greet(n: int, word: str = "hi") -> None:
        seen.append((n, word))

    jid = await greet.enqueue(1, word="yo")
    assert isinstance(jid, str)
    assert len(jid) == 24
    await greet.enqueue(2)
    async with jobs.worker(concurrency=2):
        await wait_until(lambda: len(seen) == 2)
    assert sorted(seen) == [(1, "yo"), (2, "hi")]
    assert await in_progress_total(store, store.keys) == 0
    assert await lengths(store, store.keys.queue("default")) == [0]
    assert int(await store.client.get(store.keys.stats_processed) or 0) == 2


async def test_bad_arguments_are_refused_at_enqueue_and_nothing_is_pushed(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(max_payload_bytes=1000)

    @jobs.job()
    async def f(a: int) -> None: ...

    with pytest.raises(TypeError, match="JSON"):
        await f.enqueue(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="missing a required argument"):
        await f.enqueue()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword"):
        await f.enqueue(1, b=2)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="max_payload_bytes"):
        await f.enqueue("x" * 2000)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="queue name"):
        f.options(queue="bad queue")
    with pytest.raises(TypeError, match="retry"):
        f.options(retry="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no job is registered"):
        await jobs.enqueue("nope")
    assert await lengths(store, store.keys.queue("default"),
                         store.keys.schedule("default")) == [0, 0]


async def test_a_plain_function_runs_in_a_thread_without_blocking_async_jobs(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()
    released = threading.Event()
    finished: list[str] = []

    @jobs.job()
    def blocking() -> None:
        # Waits for the async job: only possible if the loop keeps running meanwhile.
        assert released.wait(10)
        finished.append("sync")

    @jobs.job()
    async def release() -> None:
        released.set()
        finished.append("async")

    await blocking.enqueue()
    await release.enqueue()
    async with jobs.worker(concurrency=2):
        await wait_until(lambda: len(finished) == 2)
    assert finished == ["async", "sync"]


async def test_queues_are_fetched_in_strict_order(make_app: Callable[..., App]) -> None:
    jobs = make_app(queues=["high", "low"])
    order: list[str] = []

    @jobs.job(queue="low")
    async def low(n: int) -> None:
        order.append(f"low{n}")

    @jobs.job(queue="high")
    async def high(n: int) -> None:
        order.append(f"high{n}")

    for n in range(3):
        await low.enqueue(n)
    for n in range(3):
        await high.enqueue(n)
    async with jobs.worker(concurrency=1):
        await wait_until(lambda: len(order) == 6)
    assert order == ["high0", "high1", "high2", "low0", "low1", "low2"]


async def test_enqueue_many_options_and_enqueue_by_name(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(queues=["default", "other"])
    ran: list[Any] = []

    @jobs.job(name="adder")
    async def add(a: int, b: int = 0) -> None:
        ran.append(a + b)

    jids = await add.enqueue_many([((1,), {}), ((2,), {"b": 3})])
    assert len(set(jids)) == 2
    await add.options(queue="other").enqueue(10)
    await jobs.enqueue("adder", 100, b=1)
    assert await lengths(store, store.keys.queue("default"), store.keys.queue("other")) == [3, 1]
    with pytest.raises(TypeError):
        await add.enqueue_many([((1,), {}), ("garbage",)])  # type: ignore[list-item]
    async with jobs.worker():
        await wait_until(lambda: len(ran) == 4)
    assert sorted(ran) == [1, 5, 10, 101]


async def test_enqueue_sync_from_a_thread(make_app: Callable[..., App]) -> None:
    jobs = make_app()
    ran: list[int] = []

    @jobs.job()
    async def f(n: int) -> None:
        ran.append(n)

    jid = await anyio.to_thread.run_sync(f.enqueue_sync, 7)
    assert isinstance(jid, str)
    async with jobs.worker():
        await wait_until(lambda: ran == [7])


async def test_scheduled_jobs_wait_for_their_time(make_app: Callable[..., App],
                                                  store: Store) -> None:
    jobs = make_app()
    ran_at: dict[str, float] = {}

    @jobs.job()
    async def tick(label: str) -> None:
        ran_at[label] = time.time()

    start = time.time()
    await tick.enqueue_in(0.6, "later")
    await tick.enqueue_at(start - 100, "past")  # already due: enqueued at once
    assert await lengths(store, store.keys.schedule("default"),
                         store.keys.queue("default")) == [1, 1]
    async with jobs.worker():
        await wait_until(lambda: len(ran_at) == 2)
    assert ran_at["later"] >= start + 0.6 - 0.01
    assert ran_at["past"] < ran_at["later"]


async def test_a_job_scheduled_on_a_queue_runs_from_that_queue(
    make_app: Callable[..., App], store: Store
) -> None:
    """Its schedule is that queue's, and a worker serving only that queue promotes it
    onto it (had it gone to the default queue, this worker would never run it)."""
    jobs = make_app(queues=["reports"])
    ran: list[str] = []

    @jobs.job(queue="reports")
    async def report() -> None:
        ran.append(current_job().queue)

    await report.enqueue_in(0.3)
    assert await lengths(store, store.keys.schedule("reports"),
                         store.keys.schedule("default")) == [1, 0]
    async with jobs.worker():
        await wait_until(lambda: ran == ["reports"], timeout=5)
    assert await lengths(store, store.keys.schedule("reports"), store.keys.queue("reports"),
                         store.keys.queue("default")) == [0, 0, 0]


async def test_failures_retry_then_die_with_the_error(make_app: Callable[..., App],
                                                      store: Store) -> None:
    jobs = make_app()
    runs: list[int] = []

    @jobs.job(retry=2)
    async def flaky() -> None:
        runs.append(1)
        raise RuntimeError("still broken")

    await flaky.enqueue()
    async with jobs.worker():
        await wait_until(lambda: len(runs) == 3)
        await wait_until(lambda: store.client.zcard(store.keys.dead("default")), timeout=5)
    import json

    [entry] = await store.client.zrange(store.keys.dead("default"), 0, -1)
    dead = json.loads(entry)
    assert (dead["error_class"], dead["error_message"], dead["retry_count"]) == (
        "RuntimeError", "still broken", 2)
    assert len(runs) == 3
    assert int(await store.client.get(store.keys.stats_failed) or 0) == 3


async def test_shutdown_gives_back_jobs_that_did_not_finish(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(shutdown_timeout=0.2)
    started = anyio.Event()
    finished: list[str] = []

    @jobs.job()
    async def slow() -> None:
        started.set()
        await anyio.sleep(30)
        finished.append("slow")

    @jobs.job()
    async def quick() -> None:
        finished.append("quick")

    await slow.enqueue()
    async with jobs.worker(concurrency=1):
        await started.wait()
        await quick.enqueue()  # waits behind the slow one: never starts
    assert finished == []
    queued = await store.client.lrange(store.keys.queue("default"), 0, -1)
    assert len(queued) == 2  # both back, nothing lost
    assert await in_progress_total(store, store.keys) == 0
    # The interrupted job is back at the front: it runs first next time.
    import json

    assert json.loads(queued[-1])["class"].endswith("slow")


async def test_a_job_that_finishes_within_the_shutdown_timeout_is_not_given_back(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(shutdown_timeout=5.0)
    started = anyio.Event()
    ran: list[int] = []

    @jobs.job()
    async def short() -> None:
        started.set()
        await anyio.sleep(0.2)
        ran.append(1)

    await short.enqueue()
    async with jobs.worker():
        await started.wait()
    assert ran == [1]
    assert await lengths(store, store.keys.queue("default")) == [0]
    assert await in_progress_total(store, store.keys) == 0


async def test_a_queue_of_the_wrong_type_does_not_stop_the_others(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(queues=["broken", "default"])
    await store.client.hset(store.keys.queue("broken"), "x", "y")
    ran: list[int] = []

    @jobs.job()
    async def f() -> None:
        ran.append(1)

    await f.enqueue()
    async with jobs.worker():
        await wait_until(lambda: ran == [1])
    assert await store.client.hget(store.keys.queue("broken"), "x") == b"y"  # untouched


async def test_basic_fetch_runs_jobs_without_an_in_progress_list(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(fetch="basic")
    ran: list[int] = []

    @jobs.job(retry=False)
    async def f(n: int) -> None:
        ran.append(n)
        if n == 2:
            raise ValueError("two")

    await f.enqueue(1)
    await f.enqueue(2)
    async with jobs.worker():
        await wait_until(lambda: len(ran) == 2)
        await wait_until(lambda: store.client.zcard(store.keys.dead("default")))
    assert await in_progress_total(store, store.keys) == 0


async def test_an_idle_worker_starts_a_new_job_at_once(make_app: Callable[..., App]) -> None:
    # idle_fetch_interval is long: only the wake-up published by enqueue can be this fast.
    jobs = make_app(idle_fetch_interval=30.0)
    ran = anyio.Event()

    @jobs.job()
    async def f() -> None:
        ran.set()

    async with jobs.worker():
        await anyio.sleep(0.2)  # let the dispatcher go idle on an empty queue
        with anyio.fail_after(5):
            await f.enqueue()
            await ran.wait()


async def test_prefetched_jobs_that_never_started_go_back_at_shutdown(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(shutdown_timeout=0.2, prefetch=3)
    started: list[int] = []

    @jobs.job()
    async def slow(n: int) -> None:
        started.append(n)
        await anyio.sleep(30)

    for n in range(4):
        await slow.enqueue(n)
    async with jobs.worker(concurrency=1):
        await wait_until(lambda: started == [0])
        # the other three are fetched and held, but never start
        await wait_until(lambda: _queue_empty(store))
    assert started == [0]
    assert await store.client.llen(store.keys.queue("default")) == 4
    assert await in_progress_total(store, store.keys) == 0


async def _queue_empty(store: Store) -> bool:
    return int(await store.client.llen(store.keys.queue("default"))) == 0


async def test_a_fetch_failing_in_a_way_redis_py_does_not_wrap_never_ends_the_worker(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture,
) -> None:
    """A socket's own ``OSError`` (a node refusing mid-failover) and a bug in fetching
    each fail a fetch; the worker says so, goes on fetching, and runs the job."""
    jobs = make_app()
    done: list[str] = []

    @jobs.job()
    async def work(tag: str) -> None:
        done.append(tag)

    failures: list[BaseException] = [ConnectionRefusedError(111, "refused"),
                                     KeyError("a bug in fetching")]
    async with jobs.worker() as manager:
        fetch = manager.fetcher.fetch

        async def failing_fetch(want: int) -> Any:
            if failures:
                raise failures.pop(0)
            return await fetch(want)

        manager.fetcher.fetch = failing_fetch  # type: ignore[method-assign]
        await work.enqueue("after the failures")
        await wait_until(lambda: done == ["after the failures"], timeout=10)
        assert not failures
    assert "a bug in fetching" in caplog.text  # said, with its traceback
