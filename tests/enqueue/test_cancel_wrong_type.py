"""A cancel that meets a co-tenant's key of the wrong type (issue 40, defect 19): it
raises this package's own error, naming the key, and writes nothing; once the key is
gone the cancel works."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.exceptions

from cogworker_async import App, CogworkerError
from cogworker_async.errors import WrongTypeKey
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import stored_record

IDENTITY = "host:1:abc"
"""The process the job is fetched onto (no worker runs: the test fetches by hand)."""


async def test_a_cancel_set_of_another_type_raises_our_error_naming_the_key(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.job(name="report")
    async def report(n: int) -> None: ...

    jid = await report.enqueue(1)
    assert jid is not None
    fetched = await store.fetch(IDENTITY, ["default"], 1)
    assert len(fetched.jobs) == 1
    assert (await jobs.status(jid)).state == "running"
    cancels = store.keys.cancels("default", IDENTITY)
    await store.client.set(cancels, "a co-tenant's string")

    with pytest.raises(WrongTypeKey) as caught:
        await jobs.cancel(jid)

    assert isinstance(caught.value, CogworkerError)
    assert not isinstance(caught.value, redis.exceptions.RedisError)
    assert caught.value.key == cancels
    assert cancels in str(caught.value)
    assert jid in str(caught.value)
    # Nothing written: the record does not say a cancel was asked.
    status = await jobs.status(jid)
    assert status.state == "running"
    assert not status.cancel_requested
    await store.client.delete(cancels)
    assert await jobs.cancel(jid) == "stopping"


async def test_a_unique_lock_of_another_type_raises_our_error_naming_the_key(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.job(name="report", unique="until_executed")
    async def report(n: int) -> None: ...

    jid = await report.enqueue(1)
    assert jid is not None
    lock = (await stored_record(store.client, store.keys, "default", jid))["lock"]
    await store.client.delete(lock)
    await store.client.rpush(lock, "a co-tenant's list")

    with pytest.raises(WrongTypeKey) as caught:
        await jobs.cancel(jid)

    assert caught.value.key == lock
    assert lock in str(caught.value)
    assert (await jobs.status(jid)).state == "queued"


@pytest.mark.parametrize("planted", ["waiting", "arming"])
async def test_a_waiting_set_of_another_type_raises_our_error_and_keeps_the_job(
    make_app: Callable[..., App], store: Store, planted: str
) -> None:
    jobs = make_app()

    @jobs.job(name="step")
    async def step(n: int) -> None: ...

    parent = await step.enqueue(1)
    assert parent is not None
    child = await step.options(after=[parent]).enqueue(2)
    assert child is not None
    assert (await jobs.status(child)).state == "waiting"
    key = store.keys.waiting("default") if planted == "waiting" else \
        store.keys.arming("default")
    await store.client.delete(key)
    await store.client.set(key, "a co-tenant's string")

    with pytest.raises(WrongTypeKey) as caught:
        await jobs.cancel(child)

    assert caught.value.key == key
    assert key in str(caught.value)
    # Nothing written: the waiting job's copy is still there, its record says waiting.
    assert await store.client.exists(store.keys.dep("default", child)) == 1
    assert (await jobs.status(child)).state == "waiting"
