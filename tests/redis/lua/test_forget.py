"""forget.lua: a process that is gone leaves one slot's registries — but only once
nothing of it is in progress there and it is not alive there.

Run in each queue's slot the process beat to (its list there, the slot's registry, stamp,
alive marker and declared_dead marks), then in the namespace's slot (the same, plus its
beat info and workers hash; its "list" there is a name nothing writes: whether any list
is left is the caller's to know, queue by queue). Called by ``Store.forget`` (recovery,
after it took a dead process's jobs) and by ``BeatWriter.retire`` (a clean stop).
Forgetting a process that still has jobs in progress would hide them from recovery: they
would be lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from cogworker_async.redis.beats import BeatWriter
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import fetched, items, make_job, plant_wrong_type, redis_now, run_raw

IDENTITY = "host:1:abc"
OTHER = "host:2:def"
QUEUE = "default"
INFO = {"hostname": "host", "pid": 1}
SLOTS = [QUEUE, None]
"""A queue's slot, and the namespace's (``Store.forget``'s ``queue=None``)."""


@pytest.fixture
def writer(redis_url: str, keys: Keys) -> Iterator[BeatWriter]:
    w = BeatWriter(redis_url, keys, IDENTITY, [QUEUE])
    yield w
    w.close()


def declared_dead_key(keys: Keys, slot: str | None) -> str:
    return keys.declared_dead if slot is None else keys.queue_declared_dead(slot)


def marker_key(keys: Keys, slot: str | None, identity: str) -> str:
    return keys.process(identity) if slot is None else keys.queue_process(slot, identity)


async def registered(store: Store, keys: Keys, identity: str, *, alive: bool = False) -> None:
    """What beats (to QUEUE's slot and the namespace's) and a dashboard write leave
    behind for ``identity``."""
    client = store.client
    now = repr(await redis_now(store))
    await client.sadd(keys.processes, identity)
    await client.hset(keys.last_beat, identity, now)
    await client.hset(keys.beats, identity, json.dumps(INFO))
    await client.hset(keys.workers(identity), "slot-1", "jid-1")
    await client.sadd(keys.queue_identities(QUEUE), identity)
    await client.hset(keys.queue_last_beat(QUEUE), identity, now)
    if alive:
        await client.set(keys.process(identity), json.dumps(INFO), px=30_000)
        await client.set(keys.queue_process(QUEUE, identity), "1", px=30_000)


async def traces(store: Store, keys: Keys, identity: str) -> dict[str, bool]:
    """Where ``identity`` is still known: the namespace's slot, then QUEUE's."""
    client = store.client
    return {
        "registry": bool(await client.sismember(keys.processes, identity)),
        "last_beat": bool(await client.hexists(keys.last_beat, identity)),
        "beats": bool(await client.hexists(keys.beats, identity)),
        "workers": bool(await client.exists(keys.workers(identity))),
        "declared_dead": bool(await client.sismember(keys.declared_dead, identity)),
        "queue_registry": bool(await client.sismember(keys.queue_identities(QUEUE), identity)),
        "queue_last_beat": bool(await client.hexists(keys.queue_last_beat(QUEUE), identity)),
        "queue_declared_dead": bool(
            await client.sismember(keys.queue_declared_dead(QUEUE), identity)),
    }


NAMESPACE = {"registry": True, "last_beat": True, "beats": True, "workers": True,
             "declared_dead": False}
QUEUE_SLOT = {"queue_registry": True, "queue_last_beat": True, "queue_declared_dead": False}
EVERYWHERE = {**NAMESPACE, **QUEUE_SLOT}
NOWHERE = dict.fromkeys(EVERYWHERE, False)
GONE_FROM_THE_QUEUE = {**NAMESPACE, **dict.fromkeys(QUEUE_SLOT, False)}


async def forget_everywhere(store: Store, identity: str, *, declared_dead: bool) -> bool:
    """What recovery and a clean stop do: each queue's slot, then the namespace's."""
    if not await store.forget(identity, QUEUE, declared_dead=declared_dead):
        return False
    return await store.forget(identity, None, declared_dead=declared_dead)


async def test_a_gone_process_leaves_every_registry(store: Store, keys: Keys) -> None:
    await registered(store, keys, IDENTITY)

    assert await forget_everywhere(store, IDENTITY, declared_dead=False) is True

    assert await traces(store, keys, IDENTITY) == NOWHERE


async def test_a_queue_slots_forget_leaves_the_namespace_alone(store: Store, keys: Keys) -> None:
    # Without KEYS[6] and KEYS[7] (a queue's slot) neither the beat info nor the workers
    # hash is touched: they are the namespace's, forgotten there last.
    await registered(store, keys, IDENTITY)

    assert await store.forget(IDENTITY, QUEUE, declared_dead=False) is True

    assert await traces(store, keys, IDENTITY) == GONE_FROM_THE_QUEUE
    assert await store.beat_info(IDENTITY) == INFO


async def test_without_its_optional_keys_the_script_stays_in_the_queues_slot(
    store: Store, keys: Keys
) -> None:
    await registered(store, keys, IDENTITY)

    forgotten = await run_raw(store, "forget", [
        keys.in_progress(QUEUE, IDENTITY), keys.queue_identities(QUEUE),
        keys.queue_last_beat(QUEUE), keys.queue_process(QUEUE, IDENTITY),
        keys.queue_declared_dead(QUEUE)], [IDENTITY, "0"])

    assert forgotten == 1
    left = {as_bytes(key) for key in await store.client.keys(f"{keys.namespace}:*")}
    assert left == {key.encode() for key in (keys.processes, keys.last_beat, keys.beats,
                                             keys.workers(IDENTITY))}
    assert await traces(store, keys, IDENTITY) == GONE_FROM_THE_QUEUE


async def test_other_processes_are_not_touched(store: Store, keys: Keys) -> None:
    await registered(store, keys, IDENTITY)
    await registered(store, keys, OTHER)
    await store.client.sadd(keys.declared_dead, IDENTITY, OTHER)
    await store.client.sadd(keys.queue_declared_dead(QUEUE), IDENTITY, OTHER)

    assert await forget_everywhere(store, IDENTITY, declared_dead=False) is True

    assert await traces(store, keys, OTHER) == dict.fromkeys(EVERYWHERE, True)
    assert await store.beat_info(OTHER) == INFO


async def test_refused_while_jobs_are_in_progress(store: Store, keys: Keys) -> None:
    # Forgetting it would hide its jobs from recovery (the queue's registry is what it
    # walks): its list is in the queue's slot, so that is where the forget is refused.
    await registered(store, keys, IDENTITY)
    jobs = await fetched(store, IDENTITY, [make_job()])

    assert await forget_everywhere(store, IDENTITY, declared_dead=True) is False

    assert await traces(store, keys, IDENTITY) == EVERYWHERE
    assert await store.in_progress(IDENTITY, QUEUE) == jobs


async def test_a_list_in_another_queue_does_not_hold_this_one(store: Store, keys: Keys) -> None:
    # Each slot judges its own list: a list left on "reports" keeps the process in that
    # queue's registry only.
    await registered(store, keys, IDENTITY)
    await store.client.sadd(keys.queue_identities("reports"), IDENTITY)
    await fetched(store, IDENTITY, [make_job("reports")], queue="reports")

    assert await store.forget(IDENTITY, QUEUE, declared_dead=True) is True
    assert await store.forget(IDENTITY, "reports", declared_dead=True) is False

    assert await store.queue_identities(QUEUE) == set()
    assert await store.queue_identities("reports") == {IDENTITY}


@pytest.mark.parametrize("slot", SLOTS, ids=["queue", "namespace"])
async def test_refused_while_the_process_is_alive(
    store: Store, keys: Keys, slot: str | None
) -> None:
    # It beat between recovery's requeue and this call: it is not gone.
    await registered(store, keys, IDENTITY, alive=True)
    await store.client.sadd(declared_dead_key(keys, slot), IDENTITY)

    assert await store.forget(IDENTITY, slot, declared_dead=False) is False

    marked = "declared_dead" if slot is None else "queue_declared_dead"
    assert await traces(store, keys, IDENTITY) == {**EVERYWHERE, marked: True}
    assert await store.client.exists(marker_key(keys, slot, IDENTITY)) == 1


@pytest.mark.parametrize("slot", SLOTS, ids=["queue", "namespace"])
async def test_a_marker_without_a_ttl_does_not_hold_a_gone_process(
    store: Store, keys: Keys, slot: str | None
) -> None:
    # A beat's marker always has a TTL: one without is a co-tenant's, and must not keep
    # the process in the registries forever.
    await registered(store, keys, IDENTITY, alive=False)
    await store.client.set(marker_key(keys, slot, IDENTITY), "planted")

    assert await store.forget(IDENTITY, slot, declared_dead=False) is True


@pytest.mark.parametrize("slot", SLOTS, ids=["queue", "namespace"])
@pytest.mark.parametrize("keep", [True, False])
async def test_declared_dead_is_kept_only_when_asked(
    store: Store, keys: Keys, keep: bool, slot: str | None
) -> None:
    # Recovery keeps it, so that a paused process learns it is a zombie if it beats again.
    await registered(store, keys, IDENTITY)
    marks = declared_dead_key(keys, slot)
    await store.client.sadd(marks, IDENTITY, OTHER)

    assert await store.forget(IDENTITY, slot, declared_dead=keep) is True

    expected = {IDENTITY.encode(), OTHER.encode()} if keep else {OTHER.encode()}
    assert await store.client.smembers(marks) == expected


async def test_forgetting_twice_is_harmless(store: Store, keys: Keys) -> None:
    await registered(store, keys, IDENTITY)
    await forget_everywhere(store, IDENTITY, declared_dead=True)

    assert await forget_everywhere(store, IDENTITY, declared_dead=True) is True

    assert await traces(store, keys, IDENTITY) == NOWHERE


async def test_an_unreadable_in_progress_list_is_not_taken_for_empty(
    store: Store, keys: Keys
) -> None:
    await registered(store, keys, IDENTITY)
    await plant_wrong_type(store, keys.in_progress(QUEUE, IDENTITY))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.forget(IDENTITY, QUEUE, declared_dead=True)

    assert await traces(store, keys, IDENTITY) == EVERYWHERE


# -- a clean stop: BeatWriter.retire -------------------------------------------------------


async def test_retire_with_nothing_in_progress_leaves_no_trace(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    writer.beat(INFO, 30.0, first=True)
    writer.write_workers({"slot-1": "jid-1"})

    assert writer.retire() is True

    assert await traces(store, keys, IDENTITY) == NOWHERE
    assert await store.client.exists(keys.process(IDENTITY),
                                     keys.queue_process(QUEUE, IDENTITY)) == 0


async def test_retire_with_jobs_left_stays_registered_for_recovery(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # What could not be requeued or handed over at shutdown stays on the list: the
    # registries must still lead recovery to it once the stamp is old enough.
    writer.beat(INFO, 30.0, first=True)
    jobs = await fetched(store, IDENTITY, [make_job()])

    assert writer.retire() is False

    assert await store.client.exists(keys.process(IDENTITY),
                                     keys.queue_process(QUEUE, IDENTITY)) == 0, "not alive"
    assert await store.registered_identities() == {IDENTITY}
    assert await store.queue_identities(QUEUE) == {IDENTITY}
    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == jobs


async def test_retire_leaves_the_queues_with_nothing_left_in_progress(
    store: Store, keys: Keys, redis_url: str
) -> None:
    writer = BeatWriter(redis_url, keys, IDENTITY, ["emails", "reports"])
    try:
        writer.beat(INFO, 30.0, first=True)
        await fetched(store, IDENTITY, [make_job("reports")], queue="reports")

        assert writer.retire() is False
    finally:
        writer.close()

    assert await store.queue_identities("emails") == set()
    assert await store.queue_identities("reports") == {IDENTITY}
    assert await store.registered_identities() == {IDENTITY}
