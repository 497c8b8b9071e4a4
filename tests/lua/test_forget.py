"""forget.lua: a process that is gone leaves the registries — but only once nothing of
it is in progress and it is not alive.

Called by ``Store.forget`` (recovery, after it took a dead process's jobs) and by
``BeatWriter.retire`` (a clean stop). Forgetting a process that still has jobs in
progress would hide them from recovery: they would be lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from cogworker_async.redis.beats import BeatWriter
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.lua.helpers import fetched, items, make_job, plant_wrong_type, redis_now

IDENTITY = "host:1:abc"
OTHER = "host:2:def"
INFO = {"hostname": "host", "pid": 1}


@pytest.fixture
def writer(redis_url: str, keys: Keys) -> Iterator[BeatWriter]:
    w = BeatWriter(redis_url, keys, IDENTITY)
    yield w
    w.close()


async def registered(store: Store, keys: Keys, identity: str, *, alive: bool = False) -> None:
    """What beats and a dashboard write leave behind for ``identity``."""
    client = store.client
    await client.sadd(keys.in_progress_identities, identity)
    await client.hset(keys.last_beat, identity, repr(await redis_now(store)))
    await client.hset(keys.beats, identity, json.dumps(INFO))
    await client.hset(keys.workers(identity), "slot-1", "jid-1")
    if alive:
        await client.set(keys.process(identity), json.dumps(INFO), px=30_000)


async def traces(store: Store, keys: Keys, identity: str) -> dict[str, bool]:
    """Where ``identity`` is still known."""
    client = store.client
    return {
        "registry": bool(await client.sismember(keys.in_progress_identities, identity)),
        "last_beat": bool(await client.hexists(keys.last_beat, identity)),
        "beats": bool(await client.hexists(keys.beats, identity)),
        "workers": bool(await client.exists(keys.workers(identity))),
        "declared_dead": bool(await client.sismember(keys.declared_dead, identity)),
    }


EVERYWHERE = {"registry": True, "last_beat": True, "beats": True, "workers": True}
NOWHERE = {"registry": False, "last_beat": False, "beats": False, "workers": False}


async def test_a_gone_process_leaves_every_registry(store: Store, keys: Keys) -> None:
    await registered(store, keys, IDENTITY)

    assert await store.forget(IDENTITY, declared_dead=False) is True

    assert await traces(store, keys, IDENTITY) == {**NOWHERE, "declared_dead": False}


async def test_other_processes_are_not_touched(store: Store, keys: Keys) -> None:
    await registered(store, keys, IDENTITY)
    await registered(store, keys, OTHER)
    await store.client.sadd(keys.declared_dead, IDENTITY, OTHER)

    assert await store.forget(IDENTITY, declared_dead=False) is True

    assert await traces(store, keys, OTHER) == {**EVERYWHERE, "declared_dead": True}
    assert await store.beat_info(OTHER) == INFO


async def test_refused_while_jobs_are_in_progress(store: Store, keys: Keys) -> None:
    # Forgetting it would hide its jobs from recovery (the registry is what it walks).
    await registered(store, keys, IDENTITY)
    jobs = await fetched(store, IDENTITY, [make_job()])

    assert await store.forget(IDENTITY, declared_dead=True) is False

    assert await traces(store, keys, IDENTITY) == {**EVERYWHERE, "declared_dead": False}
    assert await store.in_progress(IDENTITY) == jobs


async def test_refused_while_the_process_is_alive(store: Store, keys: Keys) -> None:
    # It beat between recovery's requeue and this call: it is not gone.
    await registered(store, keys, IDENTITY, alive=True)
    await store.client.sadd(keys.declared_dead, IDENTITY)

    assert await store.forget(IDENTITY, declared_dead=False) is False

    assert await traces(store, keys, IDENTITY) == {**EVERYWHERE, "declared_dead": True}
    assert await store.client.exists(keys.process(IDENTITY)) == 1


@pytest.mark.parametrize("keep", [True, False])
async def test_declared_dead_is_kept_only_when_asked(
    store: Store, keys: Keys, keep: bool
) -> None:
    # Recovery keeps it, so that a paused process learns it is a zombie if it beats again.
    await registered(store, keys, IDENTITY)
    await store.client.sadd(keys.declared_dead, IDENTITY, OTHER)

    assert await store.forget(IDENTITY, declared_dead=keep) is True

    expected = {IDENTITY.encode(), OTHER.encode()} if keep else {OTHER.encode()}
    assert await store.client.smembers(keys.declared_dead) == expected
    assert await traces(store, keys, IDENTITY) == {**NOWHERE, "declared_dead": keep}


async def test_forgetting_twice_is_harmless(store: Store, keys: Keys) -> None:
    await registered(store, keys, IDENTITY)
    await store.forget(IDENTITY, declared_dead=True)

    assert await store.forget(IDENTITY, declared_dead=True) is True

    assert await traces(store, keys, IDENTITY) == {**NOWHERE, "declared_dead": False}


async def test_an_unreadable_in_progress_list_is_not_taken_for_empty(
    store: Store, keys: Keys
) -> None:
    await registered(store, keys, IDENTITY)
    await plant_wrong_type(store, keys.in_progress(IDENTITY))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.forget(IDENTITY, declared_dead=True)

    assert await traces(store, keys, IDENTITY) == {**EVERYWHERE, "declared_dead": False}


# -- a clean stop: BeatWriter.retire -------------------------------------------------------


async def test_retire_with_nothing_in_progress_leaves_no_trace(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    writer.beat(INFO, 30.0, first=True)
    writer.write_workers({"slot-1": "jid-1"})

    assert writer.retire() is True

    assert await traces(store, keys, IDENTITY) == {**NOWHERE, "declared_dead": False}
    assert await store.client.exists(keys.process(IDENTITY)) == 0


async def test_retire_with_jobs_left_stays_registered_for_recovery(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # What could not be requeued or handed over at shutdown stays on the list: the
    # registry must still lead recovery to it once the stamp is old enough.
    writer.beat(INFO, 30.0, first=True)
    jobs = await fetched(store, IDENTITY, [make_job()])

    assert writer.retire() is False

    assert await store.client.exists(keys.process(IDENTITY)) == 0, "no longer alive"
    assert await store.registered_identities() == {IDENTITY}
    assert await items(store, keys.in_progress(IDENTITY)) == jobs
