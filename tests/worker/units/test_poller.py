"""Poller on its own: due jobs reach the queue whose sets hold them (each queue has its
own schedule and retry sets, in its slot), jobs not yet due stay, a worker polls only the
sets of the queues it serves, and an entry that is not a job goes to dead instead of
blocking the set."""

from __future__ import annotations

import json
import time

from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings
from cogworker_async.worker.poller import BATCH, Poller
from tests.worker.units.conftest import raw_job

SETTINGS = Settings(queues=["critical", "mail", "default"])


async def add(store: Store, key: str, raw: bytes, due_in: float) -> None:
    await store.client.zadd(key, {raw: time.time() + due_in})


async def test_due_jobs_are_promoted_to_their_queues(store: Store) -> None:
    keys = store.keys
    await add(store, keys.schedule("mail"), raw_job(1, queue="mail"), -1)
    await add(store, keys.retry("default"), raw_job(2), -1)
    await add(store, keys.schedule("default"), raw_job(3), 3600)  # not yet due
    before = time.time()
    await Poller(store, SETTINGS).poll_once()
    [mail] = await store.client.lrange(keys.queue("mail"), 0, -1)
    [retried] = await store.client.lrange(keys.queue("default"), 0, -1)
    assert (json.loads(mail)["jid"], json.loads(retried)["jid"]) == ("j1", "j2")
    assert json.loads(mail)["enqueued_at"] >= before  # its wait counts from now
    assert await store.client.zrange(keys.schedule("default"), 0, -1) == [raw_job(3)]
    assert await store.client.zcard(keys.retry("default")) == 0
    assert await store.client.zcard(keys.schedule("mail")) == 0


async def test_more_due_jobs_than_one_batch_all_move(store: Store) -> None:
    count = BATCH + 5
    await store.client.zadd(store.keys.schedule("default"),
                            {raw_job(n): time.time() - 1 for n in range(count)})
    assert await Poller(store, SETTINGS).promote_due("default", "schedule") == count
    assert await store.client.llen(store.keys.queue("default")) == count


async def test_a_job_scheduled_on_a_queue_is_promoted_onto_that_queue(store: Store) -> None:
    """By a worker serving that queue only: the job lands on it, not on the default queue
    (which that worker would never fetch from)."""
    await store.schedule("critical", [raw_job(1, queue="critical")], at=time.time() - 1)
    await Poller(store, Settings(queues=["critical"])).poll_once()
    [moved] = await store.client.lrange(store.keys.queue("critical"), 0, -1)
    assert json.loads(moved)["jid"] == "j1"
    assert await store.client.llen(store.keys.queue("default")) == 0
    assert await store.client.zcard(store.keys.schedule("critical")) == 0


async def test_a_worker_leaves_the_sets_of_queues_it_does_not_serve(store: Store) -> None:
    """They wait for a worker of their queue (none could run them before anyway)."""
    waiting = raw_job(1, queue="mail")
    await add(store, store.keys.schedule("mail"), waiting, -1)
    await Poller(store, Settings(queues=["default"])).poll_once()
    assert await store.client.zrange(store.keys.schedule("mail"), 0, -1) == [waiting]
    assert await store.client.llen(store.keys.queue("mail")) == 0


async def test_a_job_goes_to_the_queue_of_its_set_whatever_its_queue_field_says(
    store: Store
) -> None:
    """A queue field that is unreadable, or names another queue, is rewritten to the
    set's queue: the job stays in the slot that holds it."""
    await add(store, store.keys.retry("critical"), raw_job(1, queue="no spaces"), -1)
    await add(store, store.keys.schedule("critical"), raw_job(2, queue="mail"), -1)
    await Poller(store, SETTINGS).poll_once()
    moved = [json.loads(raw) for raw in await store.client.lrange(store.keys.queue("critical"),
                                                                   0, -1)]
    assert sorted((entry["jid"], entry["queue"]) for entry in moved) == [
        ("j1", "critical"), ("j2", "critical")]
    assert await store.client.llen(store.keys.queue("mail")) == 0


async def test_an_entry_that_is_not_a_job_goes_to_dead(store: Store) -> None:
    await add(store, store.keys.schedule("default"), b"not json", -1)
    await add(store, store.keys.schedule("default"), raw_job(1), -1)
    await Poller(store, SETTINGS).poll_once()
    [dead] = await store.client.zrange(store.keys.dead("default"), 0, -1)
    assert json.loads(dead)["error_class"] == "UnparseablePayload"
    assert json.loads(dead)["queue"] == "default"  # the dead set of the queue it was on
    assert await store.client.llen(store.keys.queue("default")) == 1  # not held up
    assert await store.client.zcard(store.keys.schedule("default")) == 0
