"""take_lock.lua: a short lock held by one process at a time (orphan recovery).

Each process tries every ``recovery_interval``; the lock's TTL is that interval, so a
holder that dies never blocks recovery for longer than one interval.
"""

from __future__ import annotations

import pytest
import redis

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import plant_wrong_type, still_planted
from tests.waiting import wait_until

ME = "host:1:abc"
OTHER = "host:2:def"
TTL = 30.0
SHORT_TTL = 0.05


async def holder(store: Store, keys: Keys) -> bytes | None:
    value = await store.client.get(keys.recovery_lock)
    return None if value is None else as_bytes(value)


async def test_the_first_owner_takes_it_for_its_ttl(store: Store, keys: Keys) -> None:
    assert await store.take_lock(keys.recovery_lock, ME, TTL) is True

    assert await holder(store, keys) == ME.encode()
    assert TTL * 1000 - 1_000 < await store.client.pttl(keys.recovery_lock) <= TTL * 1000


async def test_another_owner_is_refused_while_it_is_held(store: Store, keys: Keys) -> None:
    await store.take_lock(keys.recovery_lock, ME, TTL)

    assert await store.take_lock(keys.recovery_lock, OTHER, TTL * 2) is False

    assert await holder(store, keys) == ME.encode()
    # A refused attempt does not stretch the holder's lease either.
    assert await store.client.pttl(keys.recovery_lock) <= TTL * 1000


async def test_the_holder_renews_it(store: Store, keys: Keys) -> None:
    await store.take_lock(keys.recovery_lock, ME, 1.0)

    assert await store.take_lock(keys.recovery_lock, ME, TTL) is True

    assert await holder(store, keys) == ME.encode()
    assert await store.client.pttl(keys.recovery_lock) > 1_000


async def test_another_owner_takes_it_once_it_expired(store: Store, keys: Keys) -> None:
    # The holder died (or stopped renewing): recovery must not stall behind it.
    assert await store.take_lock(keys.recovery_lock, ME, SHORT_TTL) is True

    await wait_until(lambda: store.take_lock(keys.recovery_lock, OTHER, TTL), timeout=5)

    assert await holder(store, keys) == OTHER.encode()
    assert await store.take_lock(keys.recovery_lock, ME, TTL) is False


async def test_a_lock_key_of_the_wrong_type_is_an_error_not_a_takeover(
    store: Store, keys: Keys
) -> None:
    await plant_wrong_type(store, keys.recovery_lock)

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await store.take_lock(keys.recovery_lock, ME, TTL)

    assert await still_planted(store, keys.recovery_lock)
