"""Poller on its own: due jobs reach their queues, jobs not yet due stay, and an entry
that is not a job goes to dead instead of blocking the set."""

from __future__ import annotations

import json
import time

from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings
from cogworker_async.worker.poller import BATCH, Poller
from tests.worker.units.conftest import raw_job

SETTINGS = Settings(queues=["critical", "low"])


async def add(store: Store, key: str, raw: bytes, due_in: float) -> None:
    await store.client.zadd(key, {raw: time.time() + due_in})


async def test_due_jobs_are_promoted_to_their_queues(store: Store) -> None:
    keys = store.keys
    await add(store, keys.schedule, raw_job(1, queue="mail"), -1)
    await add(store, keys.retry, raw_job(2), -1)
    await add(store, keys.schedule, raw_job(3), 3600)  # not yet due
    before = time.time()
    await Poller(store, SETTINGS).poll_once()
    [mail] = await store.client.lrange(keys.queue("mail"), 0, -1)
    [retried] = await store.client.lrange(keys.queue("default"), 0, -1)
    assert (json.loads(mail)["jid"], json.loads(retried)["jid"]) == ("j1", "j2")
    assert json.loads(mail)["enqueued_at"] >= before  # its wait counts from now
    assert await store.client.zrange(keys.schedule, 0, -1) == [raw_job(3)]
    assert await store.client.zcard(keys.retry) == 0


async def test_more_due_jobs_than_one_batch_all_move(store: Store) -> None:
    count = BATCH + 5
    await store.client.zadd(store.keys.schedule,
                            {raw_job(n): time.time() - 1 for n in range(count)})
    assert await Poller(store, SETTINGS).promote_due("schedule") == count
    assert await store.client.llen(store.keys.queue("default")) == count


async def test_a_job_with_an_unreadable_queue_goes_to_the_first_queue(store: Store) -> None:
    await add(store, store.keys.retry, raw_job(1, queue="no spaces"), -1)
    await Poller(store, SETTINGS).poll_once()
    [moved] = await store.client.lrange(store.keys.queue("critical"), 0, -1)
    assert json.loads(moved)["queue"] == "critical"


async def test_an_entry_that_is_not_a_job_goes_to_dead(store: Store) -> None:
    await add(store, store.keys.schedule, b"not json", -1)
    await add(store, store.keys.schedule, raw_job(1), -1)
    await Poller(store, SETTINGS).poll_once()
    [dead] = await store.client.zrange(store.keys.dead, 0, -1)
    assert json.loads(dead)["error_class"] == "UnparseablePayload"
    assert await store.client.llen(store.keys.queue("default")) == 1  # not held up
    assert await store.client.zcard(store.keys.schedule) == 0
