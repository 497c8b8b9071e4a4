"""``track_jobs=False``: no move of a job writes a status record (the cost a job of an
App that does not ask about its jobs is spared), and everything still moves."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from cogworker_async.jobs.status import Ended
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Failure, Store
from tests.redis.lua.helpers import jid_of, make_job

IDENTITY = "host:1:abc"
OWNER = "dead-host:7:f00"
QUEUE = "default"


@pytest.fixture
async def untracked(redis_url: str, namespace: str) -> AsyncIterator[Store]:
    store = Store.from_url(redis_url, namespace, track_jobs=False)
    yield store
    await store.aclose()


async def _records(store: Store, keys: Keys) -> list[bytes]:
    return [key async for key in store.client.scan_iter(match=f"{keys.namespace}:*:job:*")]


async def test_no_move_writes_a_record(untracked: Store, keys: Keys) -> None:
    store = untracked
    done, failed, back, orphan, unique = (make_job() for _ in range(5))
    await store.enqueue(QUEUE, [done, failed, back])
    await store.schedule(QUEUE, [make_job()], delay=0.0)
    assert await store.enqueue_unique("digest", jid_of(unique), 60, QUEUE, unique)
    assert await store.cron_claim("tick", 1.0, QUEUE, make_job())
    fetched = await store.fetch(IDENTITY, [QUEUE], 10)
    assert len(fetched.jobs) == 5
    assert await store.ack(IDENTITY, QUEUE, [(done, jid_of(done))]) == 1
    assert await store.file_failure(IDENTITY, QUEUE, failed, "retry", failed, 0.0,
                                    failure=Failure(jid_of(failed), "E: x", 2))
    assert await store.give_back(IDENTITY, QUEUE, back)
    due = await store.due(QUEUE, "retry", 10) + await store.due(QUEUE, "schedule", 10)
    assert await store.promote(QUEUE, "retry", [(m, m) for m in due[:1]]) == 1
    await store.enqueue(QUEUE, [orphan])
    await store.fetch(OWNER, [QUEUE], 1)
    assert (await store.recover(OWNER, QUEUE, dead_for=60.0, max_orphanings=3)) is not None

    assert await _records(store, keys) == []


async def test_a_job_that_keeps_its_result_still_has_one(untracked: Store, keys: Keys) -> None:
    raw = make_job()
    await untracked.enqueue(QUEUE, [raw])
    await untracked.fetch(IDENTITY, [QUEUE], 1)
    ended = Ended(result=b'{"ok":1}', keep=60)
    assert await untracked.ack(IDENTITY, QUEUE, [(raw, jid_of(raw), ended)]) == 1

    found = await untracked.job_status(jid_of(raw), [QUEUE])
    assert found is not None
    assert (found.state, found.result) == ("succeeded", {"ok": 1})
    assert 0 < await untracked.client.ttl(keys.record(QUEUE, jid_of(raw))) <= 60
