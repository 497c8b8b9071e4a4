"""``options(timeout=S)`` at an enqueue (issue 40, defect 18): the job's payload carries
it and the worker applies it, in place of the decorator's, as it applies the
decorator's: a run over it fails with ``JobTimeout``."""

from __future__ import annotations

import json
from collections.abc import Callable

import anyio

from cogworker_async import App
from cogworker_async.redis.store import Store
from tests.waiting import wait_until


async def _ended(jobs: App, jid: str) -> bool:
    return (await jobs.status(jid)).state in ("succeeded", "dead")


async def test_a_timeout_given_at_the_enqueue_stops_a_longer_run(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()

    @jobs.job(name="slow", retry=False)
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "done"

    jid = await slow.options(timeout=0.5, keep_result=60).enqueue(30)
    assert jid is not None
    async with jobs.worker():
        await wait_until(lambda: _ended(jobs, jid), timeout=15)
    status = await jobs.status(jid)
    assert status.state == "dead"
    assert status.error is not None
    assert "JobTimeout" in status.error
    assert "0.5s" in status.error


async def test_a_timeout_given_at_the_enqueue_replaces_the_decorators(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()

    @jobs.job(name="slow", retry=False, timeout=0.2, keep_result=60)
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "done"

    longer = await slow.options(timeout=30).enqueue(0.6)
    default = await slow.enqueue(30)
    assert longer is not None
    assert default is not None
    async with jobs.worker():
        await wait_until(lambda: _ended(jobs, longer), timeout=15)
        await wait_until(lambda: _ended(jobs, default), timeout=15)
    assert (await jobs.status(longer)).state == "succeeded"
    assert await jobs.result(longer) == "done"
    dead = await jobs.status(default)
    assert dead.state == "dead"
    assert dead.error is not None
    assert "0.2s" in dead.error


async def test_a_plain_function_gets_the_enqueues_timeout_too(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()

    @jobs.job(name="blocking", retry=False)
    def blocking(seconds: float) -> None:
        import time
        time.sleep(seconds)

    jid = await blocking.options(timeout=0.3).enqueue(1.5)
    assert jid is not None
    async with jobs.worker():
        await wait_until(lambda: _ended(jobs, jid), timeout=15)
    status = await jobs.status(jid)
    assert status.state == "dead"
    assert status.error is not None
    assert "JobTimeout" in status.error


async def test_the_payload_carries_the_timeout_the_enqueue_used(
    make_app: Callable[..., App], store: Store
) -> None:
    """As it carries ``retry`` and ``keep_result``: the job runs under the options it
    was enqueued with. A job with no timeout carries none."""
    jobs = make_app()

    @jobs.job(name="slow", timeout=5)
    async def slow() -> None: ...

    @jobs.job(name="free")
    async def free() -> None: ...

    await slow.enqueue()
    await slow.options(timeout=9).enqueue()
    await free.enqueue()
    raws = await store.client.lrange(store.keys.queue("default"), 0, -1)
    timeouts = sorted(json.loads(raw).get("timeout", 0) for raw in raws)
    assert timeouts == [0, 5, 9]


async def test_a_stored_timeout_that_is_not_a_number_falls_back_to_the_decorators(
    make_app: Callable[..., App], store: Store
) -> None:
    """A payload changed by hand (or by a middleware) to hold garbage: the worker runs the
    job under the decorator's timeout, never crashes on it."""
    jobs = make_app()

    @jobs.job(name="slow", retry=False, timeout=0.3)
    async def slow(seconds: float) -> None:
        await anyio.sleep(seconds)

    jid = await slow.options(timeout=60).enqueue(30)
    assert jid is not None
    key = store.keys.queue("default")
    [raw] = await store.client.lrange(key, 0, -1)
    payload = json.loads(raw)
    payload["timeout"] = "soon"
    await store.client.lset(key, 0, json.dumps(payload, separators=(",", ":")))
    async with jobs.worker():
        await wait_until(lambda: _ended(jobs, jid), timeout=15)
    status = await jobs.status(jid)
    assert status.state == "dead"
    assert status.error is not None
    assert "0.3s" in status.error
