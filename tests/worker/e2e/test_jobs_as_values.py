"""Jobs as values: a job's status by jid, its result, cancelling it, its progress, and
enqueues with a jid of the caller's — through real worker processes (the CLI), on one
Redis and on a cluster."""

from __future__ import annotations

import time
from typing import Any, Final

import anyio
import pytest
import redis.asyncio

from cogworker_async import JobCancelled, JobFailed
from cogworker_async.jobs.status import LIVE_TTL
from cogworker_async.redis.keys import Keys
from tests.redis.lua.helpers import record_ttl
from tests.waiting import wait_until
from tests.worker.e2e import jobsapp
from tests.worker.e2e.conftest import (
    StartWorker,
    in_progress,
    ran,
    started,
    wait_ready,
    wait_while_alive,
)
from tests.worker.e2e.jobsapp import Jobs


async def _state(jobs: Jobs, jid: str) -> str:
    return (await jobs.app.status(jid)).state


async def test_a_job_s_status_follows_it_and_its_result_is_kept(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    jid = await jobs.compute.enqueue(21)
    assert jid is not None
    waiting = await jobs.app.status(jid)
    assert (waiting.state, waiting.queue, waiting.name, waiting.attempt) == \
        ("queued", "default", "compute", 1)
    assert waiting.enqueued_at is not None
    assert abs(waiting.enqueued_at - time.time()) < 60

    worker = start_worker()
    await wait_ready(r, namespace, worker)
    assert await jobs.app.result(jid, timeout=10) == {"n": 21, "double": 42}

    done = await jobs.app.status(jid)
    assert done.state == "succeeded"
    assert done.has_result
    assert done.result == {"n": 21, "double": 42}
    assert done.started_at is not None
    assert done.finished_at is not None
    assert done.enqueued_at is not None
    assert done.enqueued_at <= done.started_at <= \
        done.finished_at
    assert done.process is not None  # which process ran it
    # Kept keep_result seconds (60), not longer.
    assert 0 < await r.ttl(Keys(namespace).record("default", jid)) <= 60
    assert await ran(r, namespace) == ["compute:21"]


async def test_a_job_that_keeps_no_result_ends_with_none_and_a_bounded_record(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    jid = await jobs.record.enqueue("plain")
    assert jid is not None
    keys = Keys(namespace)
    record = keys.record("default", jid)
    # Alive: a field of the queue's live hash, with the long bound.
    assert LIVE_TTL - 60 < await record_ttl(r, keys, "default", jid) <= LIVE_TTL
    worker = start_worker()
    await wait_ready(r, namespace, worker)
    assert await jobs.app.result(jid, timeout=10) is None  # polled: no publish for it
    found = await jobs.app.status(jid)
    assert found.state == "succeeded"
    assert not found.has_result
    assert 0 < await r.ttl(record) <= jobs.app.settings.keep_status
    assert await r.hexists(keys.live_records("default"), jid) == 0  # finished: left it


async def test_result_raises_for_dead_cancelled_unknown_and_late_jobs(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    dead = await jobs.fail.options(retry=False, keep_result=60).enqueue("x")
    waiting = await jobs.record.enqueue("never")
    assert dead is not None
    assert waiting is not None
    assert await jobs.app.cancel(waiting) == "cancelled"
    with pytest.raises(JobCancelled):
        await jobs.app.result(waiting, timeout=1)
    with pytest.raises(LookupError):
        await jobs.app.result("no-such-job", timeout=1)
    assert (await jobs.app.status("no-such-job")).state == "unknown"
    with pytest.raises(TimeoutError):
        await jobs.app.result(dead, timeout=0.2)  # no worker yet: still queued

    worker = start_worker()
    await wait_ready(r, namespace, worker)
    with pytest.raises(JobFailed) as failed:
        await jobs.app.result(dead, timeout=10)
    assert failed.value.error == "RuntimeError: boom x"
    assert (await jobs.app.status(dead)).state == "dead"
    # The cancelled job was dropped unrun when the worker reached it.
    await wait_while_alive(worker, lambda: _empty_queue(r, namespace), timeout=10)
    assert "never" not in await ran(r, namespace)


async def _empty_queue(r: redis.asyncio.Redis, namespace: str) -> bool:
    return await r.llen(Keys(namespace).queue("default")) == 0


async def test_a_running_async_job_is_cancelled_within_a_second(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    worker = start_worker()
    await wait_ready(r, namespace, worker)
    jid = await jobs.sleepy.options(keep_result=60).enqueue("long", 30.0)
    assert jid is not None
    await wait_while_alive(worker, lambda: _is(jobs, jid, "running"), timeout=10)
    await wait_until(lambda: _started(r, namespace, "long"), timeout=10)

    asked = time.monotonic()
    assert await jobs.app.cancel(jid) == "stopping"
    with pytest.raises(JobCancelled):
        await jobs.app.result(jid, timeout=5)
    took = time.monotonic() - asked
    assert took < 2.0, f"cancelled after {took:.2f}s"  # the bound is ~1 s; slack for CI
    assert await ran(r, namespace) == []  # it never got to its end
    # Acked: not retried, not dead, on no list.
    keys = Keys(namespace)
    assert await r.zcard(keys.retry("default")) == 0
    assert await r.zcard(keys.dead("default")) == 0
    assert await in_progress(r, namespace) == []
    assert await jobs.app.cancel(jid) == "finished"
    assert worker.alive()


async def _is(jobs: Jobs, jid: str, state: str) -> bool:
    return await _state(jobs, jid) == state


async def _started(r: redis.asyncio.Redis, namespace: str, tag: str) -> bool:
    return tag in await started(r, namespace)


async def test_a_plain_function_sees_cancel_requested_and_stops_itself(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    worker = start_worker()
    await wait_ready(r, namespace, worker)
    jid = await jobs.stoppable.enqueue("sync", 30.0)
    assert jid is not None
    await wait_until(lambda: _started(r, namespace, "sync"), timeout=10)
    assert await jobs.app.cancel(jid) == "stopping"
    await wait_while_alive(worker, lambda: _is(jobs, jid, "cancelled"), timeout=5)
    assert await ran(r, namespace) == []
    assert await in_progress(r, namespace) == []


async def test_a_cancelled_scheduled_job_is_dropped_when_due(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    worker = start_worker()
    await wait_ready(r, namespace, worker)
    jid = await jobs.record.enqueue_in(0.5, "later")
    assert jid is not None
    assert await _state(jobs, jid) == "scheduled"
    assert await jobs.app.cancel(jid) == "cancelled"
    assert await _state(jobs, jid) == "cancelled"
    keys = Keys(namespace)
    # Due, promoted by the poller: dropped instead of queued.
    await wait_while_alive(worker, lambda: _zset_empty(r, keys.schedule("default")),
                           timeout=10)
    assert await _empty_queue(r, namespace)
    assert await ran(r, namespace) == []
    assert await _state(jobs, jid) == "cancelled"


async def _zset_empty(r: redis.asyncio.Redis, key: str) -> bool:
    return await r.zcard(key) == 0


async def test_progress_shows_in_the_status_while_it_runs(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    worker = start_worker()
    await wait_ready(r, namespace, worker)
    jid = await jobs.progressing.enqueue("p", 30.0)
    assert jid is not None

    async def reported() -> bool:
        found = await jobs.app.status(jid)
        return found.state == "running" and found.progress == 0.5

    await wait_while_alive(worker, reported, timeout=10)
    found = await jobs.app.status(jid)
    assert found.info == {"tag": "p", "step": 100}  # the last report, coalesced
    assert found.process is not None
    assert await jobs.app.cancel(jid) == "stopping"
    await wait_while_alive(worker, lambda: _is(jobs, jid, "cancelled"), timeout=5)


async def test_a_jid_of_the_caller_s_is_enqueued_once_while_alive(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    order = jobs.compute.options(jid="order-42")
    assert await order.enqueue(1) == "order-42"
    assert await order.enqueue(1) is None  # queued: a duplicate
    assert await jobs.compute.options(jid="order-42").enqueue_in(60, 1) is None
    worker = start_worker()
    await wait_ready(r, namespace, worker)
    assert await jobs.app.result("order-42", timeout=10) == {"n": 1, "double": 2}
    # Finished: the jid may be used again, and the new run has its own result.
    assert await order.enqueue(2) == "order-42"
    await wait_while_alive(worker, lambda: _ran_twice(r, namespace), timeout=10)
    assert await jobs.app.result("order-42", timeout=10) == {"n": 2, "double": 4}
    assert await ran(r, namespace) == ["compute:1", "compute:2"]


async def _ran_twice(r: redis.asyncio.Redis, namespace: str) -> bool:
    return len(await ran(r, namespace)) == 2


async def test_a_result_that_is_not_json_fails_the_job_once_and_never_reruns_it(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    worker = start_worker()
    await wait_ready(r, namespace, worker)
    jid = await jobs.unjsonable.enqueue("set")  # retry=3: still not run again
    assert jid is not None
    with pytest.raises(JobFailed) as failed:
        await jobs.app.result(jid, timeout=10)
    assert failed.value.error is not None
    assert failed.value.error.startswith("ResultNotJSON")
    keys = Keys(namespace)
    assert await r.zcard(keys.dead("default")) == 1
    assert await r.zcard(keys.retry("default")) == 0
    assert await ran(r, namespace) == ["set"]


async def test_bad_input_is_refused_at_the_call(jobs: Jobs) -> None:
    with pytest.raises(TypeError):
        jobs.record.options(jid=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="quotes"):
        jobs.record.options(jid='a"b')
    with pytest.raises(ValueError, match="keep_result"):
        jobs.record.options(keep_result=-1)
    with pytest.raises(ValueError, match="enqueue_many"):
        await jobs.record.options(jid="one").enqueue_many([(("a",), {})])
    with pytest.raises(ValueError, match="timeout"):
        await jobs.app.result("x", timeout=-1)


async def test_an_app_that_tracks_no_jobs_runs_them_and_writes_no_record(
    redis_url: str, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    untracked = jobsapp.build(redis_url, namespace, track_jobs=False)
    try:
        worker = start_worker(track_jobs=False)
        await wait_ready(r, namespace, worker)
        for tag in ("a", "b", "c"):
            assert await untracked.record.enqueue(tag) is not None
        await untracked.fail.options(retry=False).enqueue("d")
        await wait_while_alive(worker, lambda: _ran_four(r, namespace), timeout=10)
        await wait_while_alive(worker, lambda: _no_list_left(r, namespace), timeout=10)
    finally:
        await untracked.app.close()
    assert [key async for key in r.scan_iter(match=f"{namespace}:*:job:*")] == []
    assert await r.exists(Keys(namespace).live_records("default")) == 0


async def _ran_four(r: redis.asyncio.Redis, namespace: str) -> bool:
    return len(await ran(r, namespace)) == 4


async def _no_list_left(r: redis.asyncio.Redis, namespace: str) -> bool:
    return await in_progress(r, namespace) == []


MANY_WAITS: Final = 200
"""More concurrent ``result()`` waits than the pool has connections (100)."""


async def test_many_concurrent_result_waits_share_one_subscription(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    jids = [await jobs.compute.enqueue(n) for n in range(MANY_WAITS)]
    assert None not in jids
    keys = Keys(namespace)
    channels = [keys.finished_channel(str(jid)) for jid in jids]
    async with anyio.create_task_group() as tg:
        results: dict[int, Any] = {}

        async def wait_for(n: int, jid: str) -> None:
            results[n] = await jobs.app.result(jid, timeout=60)

        for n, jid in enumerate(jids):
            tg.start_soon(wait_for, n, str(jid))
        # Every waiter is subscribed before any job runs...
        await wait_until(lambda: _all_subscribed(r, channels), timeout=20)
        if isinstance(r, redis.asyncio.Redis):  # one server: its connections are ours
            subscribers = await r.client_list(_type="pubsub")
            assert len(subscribers) <= 2  # this app's one, and the test's nothing else
            assert len(await r.client_list()) <= 30  # the pool's 100 are not taken
        worker = start_worker()
        await wait_ready(r, namespace, worker)
    assert results == {n: {"n": n, "double": 2 * n} for n in range(MANY_WAITS)}
    assert jobs.app._client.store().finished_waits.channels == 0  # all unsubscribed


async def _all_subscribed(r: redis.asyncio.Redis, channels: list[str]) -> bool:
    counts = await r.pubsub_numsub(*channels)
    return all(int(count) >= 1 for _, count in counts)


async def test_result_waits_survive_a_lost_subscription(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    if not isinstance(r, redis.asyncio.Redis):
        pytest.skip("CLIENT KILL of one server's subscribers")
    jids = [str(await jobs.compute.enqueue(n)) for n in range(3)]
    channels = [Keys(namespace).finished_channel(jid) for jid in jids]
    async with anyio.create_task_group() as tg:
        results: list[Any] = []

        async def wait_for(jid: str) -> None:
            results.append(await jobs.app.result(jid, timeout=30))

        for jid in jids:
            tg.start_soon(wait_for, jid)
        await wait_until(lambda: _all_subscribed(r, channels), timeout=10)
        await r.client_kill_filter(_type="pubsub")
        # Subscribed again by the next reader; the records tell meanwhile.
        await wait_until(lambda: _all_subscribed(r, channels), timeout=10)
        worker = start_worker()
        await wait_ready(r, namespace, worker)
    assert sorted(result["n"] for result in results) == [0, 1, 2]


async def test_a_worker_sweeps_the_live_record_of_a_job_that_vanished(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    # A queued job's list deleted by hand long ago: its live record is past its bound.
    keys = Keys(namespace)
    seconds, _ = await r.time()
    await r.hset(keys.live_records("default"), "vanished",
                 f"queued\tsend_email\t1.0\t{int(seconds) - 1}")
    waiting = await jobs.record.enqueue("stays")
    assert waiting is not None
    worker = start_worker()
    await wait_ready(r, namespace, worker)

    # Within a sweep step (every 5 s): gone, and nothing else.
    await wait_while_alive(worker, lambda: _gone(r, keys), timeout=20)
    assert (await jobs.app.status(waiting)).state in ("queued", "running", "succeeded")


async def _gone(r: redis.asyncio.Redis, keys: Keys) -> bool:
    return not await r.hexists(keys.live_records("default"), "vanished")
