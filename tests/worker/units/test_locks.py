"""JobLocks on its own: unique locks released when the job is done with them (and only
by their owner), kept across a retry; a periodic job never runs beside its previous run.
Each lock is in the slot of the job's queue (``keys.unique``, ``keys.periodic_running``)."""

from __future__ import annotations

from typing import Any

from cogworker_async.jobs.periodic import RUNNING_LOCK_TTL
from cogworker_async.redis.store import Store
from cogworker_async.worker.locks import JobLocks, release_for_dead
from cogworker_async.worker.outcome import Ack, Filing

DIGEST = "d1"
UNIQUE_TTL = 30.0


def unique_payload(jid: str, policy: str, queue: str = "default") -> dict[str, Any]:
    return {"jid": jid, "class": "app.job", "args": [], "kwargs": {}, "queue": queue,
            "unique_digest": DIGEST, "unique_policy": policy, "unique_ttl": UNIQUE_TTL}


async def locked(store: Store, jid: str, policy: str = "until_executed",
                 queue: str = "default") -> dict[str, Any]:
    """The payload of ``jid``, holding the unique lock its enqueue took."""
    assert await store.take_lock(store.keys.unique(queue, DIGEST), jid, UNIQUE_TTL)
    return unique_payload(jid, policy, queue)


async def holder(store: Store, queue: str = "default") -> str | None:
    value = await store.client.get(store.keys.unique(queue, DIGEST))
    return None if value is None else value.decode()


async def test_a_unique_lock_is_released_once_the_job_ran(store: Store) -> None:
    payload = await locked(store, "j1")
    locks = JobLocks(store)
    assert await locks.before_run(payload)
    assert await holder(store) == "j1"  # held while it runs
    await locks.after_settle(payload, Ack(), ran=True)
    assert await holder(store) is None


async def test_a_unique_lock_is_kept_over_the_retry_delay(store: Store) -> None:
    payload = await locked(store, "j1")
    await JobLocks(store).after_settle(payload, Filing("retry", payload, 120.0, terminal=False),
                                       ran=True)
    assert await holder(store) == "j1"
    assert await store.client.pttl(store.keys.unique("default", DIGEST)) > 120_000


async def test_the_lock_of_a_job_of_another_queue_is_released_in_that_queue_s_slot(
    store: Store
) -> None:
    """A job's lock is found by the queue in its payload: released there, and a key of
    the same digest in another queue's slot is left alone."""
    payload = await locked(store, "j1", queue="mail")
    await locked(store, "j2")
    await JobLocks(store).after_settle(payload, Ack(), ran=True)
    assert await holder(store, "mail") is None
    assert await holder(store) == "j2"


async def test_a_unique_lock_is_released_when_the_job_goes_to_dead(store: Store) -> None:
    payload = await locked(store, "j1")
    await JobLocks(store).after_settle(payload, Filing("dead", payload, 0.0, terminal=True),
                                       ran=True)
    assert await holder(store) is None


async def test_until_started_is_released_before_the_run(store: Store) -> None:
    payload = await locked(store, "j1", policy="until_started")
    assert await JobLocks(store).before_run(payload)
    assert await holder(store) is None


async def test_a_lock_is_only_ever_released_by_its_owner(store: Store) -> None:
    await locked(store, "someone-else")
    await JobLocks(store).after_settle(unique_payload("j1", "until_executed"), Ack(), ran=True)
    assert await holder(store) == "someone-else"


async def test_a_periodic_run_is_skipped_while_the_previous_one_runs(store: Store) -> None:
    locks = JobLocks(store)
    first = {"jid": "j1", "class": "app.report", "periodic": "report", "queue": "default"}
    second = {"jid": "j2", "class": "app.report", "periodic": "report", "queue": "default"}
    assert await locks.before_run(first)
    assert not await locks.before_run(second)
    ttl = await store.client.pttl(store.keys.periodic_running("default", "report"))
    assert 0 < ttl <= RUNNING_LOCK_TTL * 1000
    await locks.after_settle(first, Ack(), ran=True)
    assert await locks.before_run(second)


async def test_a_job_buried_by_recovery_releases_its_unique_lock(store: Store) -> None:
    payload = await locked(store, "j1")
    await release_for_dead(store, payload)
    assert await holder(store) is None


async def test_a_unique_ttl_that_is_not_a_number_extends_by_the_default(store: Store) -> None:
    """Bad data in ``unique_ttl`` is read as absent (``job.number``), never an error."""
    payload = {**await locked(store, "j1"), "unique_ttl": "soon"}
    await JobLocks(store).after_settle(payload, Filing("retry", payload, 120.0, terminal=False),
                                       ran=True)
    ttl = await store.client.pttl(store.keys.unique("default", DIGEST))
    assert (120.0 + RUNNING_LOCK_TTL - 60.0) * 1000 < ttl <= (120.0 + RUNNING_LOCK_TTL) * 1000
