"""limit_concurrent.lua, limit_window.lua, limit_bucket.lua: the limiters' decisions, by
Redis TIME, on a real server.

- concurrent: at most N holders; the slot of a holder whose process's alive marker is
  gone (what the marker's TTL does to a SIGKILLed process) is freed by the next call
  that finds the limiter full; a leased holder (outside any worker) once its lease has
  run out; a release is idempotent;
- window: at most N per fixed window of Redis TIME, a fresh count in the next window;
- bucket: N tokens, refilled continuously over the given seconds;
- keys of the wrong type are refused with an error naming the key (left as they were);
  fields that are not numbers count as a fresh state.

The windows used are either long (a million seconds: no edge falls within a test) or
judged by the Redis TIME each reply carries, so no test depends on when it runs.
"""

from __future__ import annotations

import math
from typing import Any, cast

import pytest
import redis
from redis.crc import key_slot

from cogworker_async.limits.limiter import MIN_PERIOD
from cogworker_async.redis import limits
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.limits import HOLDERS_IDLE_TTL, Decision, holder_member
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import plant_wrong_type, still_planted
from tests.waiting import wait_until

ME = "host:1:abc"
OTHER = "host:2:def"
NAME = "payments"
LONG = 1_000_000.0
"""Seconds of a window or refill that no test lasts: no edge in the middle of a test."""


async def alive(store: Store, *identities: str) -> None:
    """Each process's alive marker, as its beat writes it (with a TTL)."""
    for identity in identities:
        await store.client.set(store.keys.process(identity), "{}", px=60_000)


def member(identity: str | None, jid: str, token: str = "t0", lease: float = 60.0) -> str:
    return holder_member(identity, jid, token, lease)


async def holders(store: Store, name: str = NAME) -> set[str]:
    found = await store.client.zrange(store.keys.limiter(name, "holders"), 0, -1)
    return {as_bytes(cast(bytes, m)).decode() for m in found}


async def take(store: Store, holder: str, capacity: int = 2) -> Decision:
    return await limits.take_slot(store, NAME, capacity, holder)


# -- concurrent ---------------------------------------------------------------------------


async def test_admits_up_to_n_holders_then_refuses(store: Store) -> None:
    await alive(store, ME, OTHER)

    first, second = await take(store, member(ME, "j1")), await take(store, member(OTHER, "j2"))
    third = await take(store, member(ME, "j3"))

    assert (first.admitted, first.level) == (True, 1)
    assert (second.admitted, second.level) == (True, 2)
    assert (third.admitted, third.level, third.retry_after) == (False, 2, None)
    assert await holders(store) == {member(ME, "j1"), member(OTHER, "j2")}


async def test_a_release_frees_the_slot_and_a_second_release_changes_nothing(
    store: Store,
) -> None:
    await alive(store, ME)
    await take(store, member(ME, "j1"))
    await take(store, member(ME, "j2"))

    await limits.release_slot(store, NAME, member(ME, "j1"))
    await limits.release_slot(store, NAME, member(ME, "j1"))

    assert await holders(store) == {member(ME, "j2")}
    assert (await take(store, member(ME, "j3"))).admitted
    assert not (await take(store, member(ME, "j4"))).admitted


async def test_the_slot_of_a_holder_whose_process_is_gone_is_freed_when_needed(
    store: Store,
) -> None:
    await alive(store, ME, OTHER)
    await take(store, member(OTHER, "j1"))
    await take(store, member(ME, "j2"))
    await store.client.delete(store.keys.process(OTHER))  # its TTL ran out: it died

    decision = await take(store, member(ME, "j3"))

    assert (decision.admitted, decision.level, decision.freed) == (True, 2, 1)
    assert await holders(store) == {member(ME, "j2"), member(ME, "j3")}


async def test_holders_of_a_live_process_keep_their_slots_however_long(store: Store) -> None:
    await alive(store, ME)
    await take(store, member(ME, "j1"), capacity=1)
    await store.client.zadd(store.keys.limiter(NAME, "holders"), {member(ME, "j1"): 1.0})

    decision = await take(store, member(ME, "j2"), capacity=1)

    assert (decision.admitted, decision.freed) == (False, 0)


async def test_a_repeated_call_adds_nothing_twice(store: Store) -> None:
    await alive(store, ME)
    await take(store, member(ME, "j1"))
    await take(store, member(ME, "j2"))

    again = await take(store, member(ME, "j1"))  # its reply was lost: sent again

    assert (again.admitted, again.level) == (True, 2)
    assert len(await holders(store)) == 2


async def test_a_leased_holder_is_freed_once_its_lease_has_run_out(store: Store) -> None:
    await alive(store, ME)
    short = member(None, "-", "lease", lease=0.05)
    assert (await take(store, short, capacity=1)).admitted
    assert not (await take(store, member(None, "-", "other", lease=60), capacity=1)).admitted

    async def taken() -> bool:
        return (await take(store, member(ME, "j1"), capacity=1)).admitted

    await wait_until(taken, timeout=5)
    assert await holders(store) == {member(ME, "j1")}


async def test_a_leased_holder_keeps_its_slot_within_its_lease(store: Store) -> None:
    await take(store, member(None, "-", "lease", lease=60), capacity=1)

    assert not (await take(store, member(None, "-", "other"), capacity=1)).admitted


async def test_a_member_not_of_ours_is_freed_when_its_slot_is_needed(store: Store) -> None:
    await alive(store, ME)
    await store.client.zadd(store.keys.limiter(NAME, "holders"), {"planted by hand": 1.0})

    decision = await take(store, member(ME, "j1"), capacity=1)

    assert (decision.admitted, decision.freed) == (True, 1)


async def test_the_holders_key_expires_when_nobody_uses_the_limiter(store: Store) -> None:
    await alive(store, ME)
    await take(store, member(ME, "j1"))

    ttl = await store.client.ttl(store.keys.limiter(NAME, "holders"))
    assert HOLDERS_IDLE_TTL - 5 < ttl <= HOLDERS_IDLE_TTL


async def test_holders_of_the_wrong_type_are_refused_with_the_key_named(store: Store) -> None:
    key = store.keys.limiter(NAME, "holders")
    await plant_wrong_type(store, key)

    with pytest.raises(redis.exceptions.ResponseError, match=f"WRONGTYPE.*{key}.*not a zset"):
        await take(store, member(ME, "j1"))
    assert await still_planted(store, key)


# -- window -------------------------------------------------------------------------------


async def window(store: Store, capacity: int = 3, seconds: float = LONG) -> Decision:
    return await limits.take_window(store, NAME, capacity, seconds)


async def test_a_window_admits_n_then_refuses_until_it_ends(store: Store) -> None:
    decisions = [await window(store) for _ in range(4)]

    assert [d.admitted for d in decisions] == [True, True, True, False]
    assert [d.level for d in decisions] == [1, 2, 3, 3]
    refused = decisions[-1]
    assert refused.retry_after is not None
    end = (math.floor(refused.now / LONG) + 1) * LONG
    assert refused.retry_after == pytest.approx(end - refused.now, abs=0.002)


async def test_a_window_key_expires_with_its_window(store: Store) -> None:
    decision = await window(store, seconds=10.0)

    pttl = await store.client.pttl(store.keys.limiter(NAME, "window"))
    assert decision.retry_after is not None
    assert 0 < pttl <= decision.retry_after * 1000 + 1000


async def test_the_shortest_window_a_limiter_takes_works_and_expires(store: Store) -> None:
    # limiter.MIN_PERIOD: one millisecond (shorter is refused at the call; 1e-300 used to
    # fail in Redis at every acquisition and leave the key with no TTL).
    decision = await window(store, capacity=1, seconds=MIN_PERIOD)

    assert decision.admitted
    assert await store.client.pttl(store.keys.limiter(NAME, "window")) > 0


async def test_each_window_admits_n_and_the_next_one_starts_afresh(store: Store) -> None:
    seconds, capacity = 0.25, 3
    decisions: list[Decision] = []

    async def a_later_window_admitted() -> bool:
        decisions.append(await window(store, capacity, seconds))
        refused = [d for d in decisions if not d.admitted]
        return bool(refused) and decisions[-1].admitted and \
            decisions[-1].now // seconds > refused[0].now // seconds

    await wait_until(a_later_window_admitted, timeout=5, every=0.01)

    by_window: dict[float, list[Decision]] = {}
    for decision in decisions:
        by_window.setdefault(decision.now // seconds, []).append(decision)
    for index, seen in by_window.items():
        admitted = [d for d in seen if d.admitted]
        assert len(admitted) <= capacity, index
        assert [d.level for d in admitted] == list(range(1, len(admitted) + 1)), index
        if any(not d.admitted for d in seen):  # refused only once the window was full
            assert seen[:capacity] == admitted, index
            assert len(admitted) == capacity, index


async def test_a_window_of_the_wrong_type_is_refused_with_the_key_named(store: Store) -> None:
    key = store.keys.limiter(NAME, "window")
    await store.client.rpush(key, "planted")

    with pytest.raises(redis.exceptions.ResponseError, match=f"WRONGTYPE.*{key}.*not a hash"):
        await window(store)
    assert await store.client.lrange(key, 0, -1) == [b"planted"]


async def test_a_window_whose_count_is_not_a_number_counts_as_empty(store: Store) -> None:
    first = await window(store)
    await store.client.hset(store.keys.limiter(NAME, "window"), "count", "many")

    again = await window(store)

    assert (first.level, again.admitted, again.level) == (1, True, 1)


# -- bucket -------------------------------------------------------------------------------


async def token(store: Store, capacity: int = 3, seconds: float = LONG) -> Decision:
    return await limits.take_token(store, NAME, capacity, seconds)


async def test_a_full_bucket_gives_n_tokens_then_says_when_the_next_comes(
    store: Store,
) -> None:
    decisions = [await token(store) for _ in range(4)]

    assert [d.admitted for d in decisions] == [True, True, True, False]
    assert [d.level for d in decisions] == [2, 1, 0, 0]
    per_token = LONG / 3
    assert decisions[-1].retry_after == pytest.approx(per_token, rel=0.001)


async def test_a_bucket_refills_at_its_rate(store: Store) -> None:
    capacity, seconds = 2, 0.2  # a token per 0.1 s
    drained = [await token(store, capacity, seconds) for _ in range(capacity + 1)]
    assert [d.admitted for d in drained] == [True, True, False]
    refused = drained[-1]
    found: list[Decision] = []

    async def refilled() -> bool:
        found.append(await token(store, capacity, seconds))
        return found[-1].admitted

    await wait_until(refilled, timeout=5, every=0.01)

    # Admitted no sooner than a token's time after the bucket was emptied.
    assert found[-1].now - drained[-2].now >= seconds / capacity - 0.001
    assert refused.retry_after is not None
    assert refused.retry_after <= seconds / capacity + 0.001


async def test_a_bucket_never_holds_more_than_n(store: Store) -> None:
    await token(store, 3, 10.0)
    await store.client.hset(store.keys.limiter(NAME, "bucket"), "stamp", "1.0")  # long ago

    decisions = [await token(store, 3, 10.0) for _ in range(4)]

    assert [d.admitted for d in decisions] == [True, True, True, False]


async def test_a_bucket_key_expires_once_it_would_be_full(store: Store) -> None:
    await token(store, 4, 2.0)

    pttl = await store.client.pttl(store.keys.limiter(NAME, "bucket"))
    assert 0 < pttl <= 0.5 * 1000 + 1000  # one token of four, over 2 s: 0.5 s


async def test_a_bucket_of_the_wrong_type_is_refused_with_the_key_named(store: Store) -> None:
    key = store.keys.limiter(NAME, "bucket")
    await store.client.set(key, "planted")

    with pytest.raises(redis.exceptions.ResponseError, match=f"WRONGTYPE.*{key}.*not a hash"):
        await token(store)
    assert await store.client.get(key) == b"planted"


async def test_a_bucket_whose_fields_are_not_numbers_counts_as_full(store: Store) -> None:
    await store.client.hset(store.keys.limiter(NAME, "bucket"),
                            mapping={"tokens": "nan", "stamp": "soon"})

    decision = await token(store)

    assert (decision.admitted, decision.level) == (True, 2)


# -- one slot -----------------------------------------------------------------------------


def test_a_limiters_keys_share_the_slot_of_the_alive_markers(keys: Keys) -> None:
    slot = key_slot(keys.process(ME).encode())
    for part in ("holders", "window", "bucket", "over:29000000"):
        assert key_slot(keys.limiter(NAME, part).encode()) == slot, part
    assert key_slot(keys.limiters.encode()) == slot


# Scenarios for tests/redis/lua/test_slots.py (each script called as the code calls it): ``s``
# is its Setup (a Store on a recording lane, and its Keys).


async def limit_concurrent(s: Any) -> None:
    await alive(s.store, ME)
    assert (await limits.take_slot(s.store, NAME, 1, member(ME, "j1"))).admitted
    await s.store.client.delete(s.keys.process(ME))
    assert (await limits.take_slot(s.store, NAME, 1, member(OTHER, "j2"))).freed == 1


async def limit_window(s: Any) -> None:
    assert (await limits.take_window(s.store, NAME, 1, LONG)).admitted


async def limit_bucket(s: Any) -> None:
    assert (await limits.take_token(s.store, NAME, 1, LONG)).admitted


# -- many acquisitions in one call (a worker's batched calls: limit_calls.py) -------------


async def test_one_call_admits_members_in_order_until_full(store: Store) -> None:
    await alive(store, ME)
    asked = [member(ME, f"j{i}") for i in range(4)]

    decisions = await limits.take_slots(store, NAME, 3, asked)

    assert [d.admitted for d in decisions] == [True, True, True, False]
    assert await holders(store) == set(asked[:3])


async def test_a_batched_call_repeated_adds_nothing_twice_and_admits_the_same(
    store: Store,
) -> None:
    await alive(store, ME)
    asked = [member(ME, "j1"), member(ME, "j2")]
    first = await limits.take_slots(store, NAME, 2, asked)

    again = await limits.take_slots(store, NAME, 2, asked)  # a lost reply, sent again

    assert [d.admitted for d in first] == [d.admitted for d in again] == [True, True]
    assert again[0].level == 2
    assert await holders(store) == set(asked)


async def test_a_batched_call_frees_the_slots_of_a_gone_process_for_its_members(
    store: Store,
) -> None:
    await alive(store, ME)
    await take(store, member(OTHER, "old1"))  # OTHER has no alive marker: gone
    await take(store, member(OTHER, "old2"))

    decisions = await limits.take_slots(store, NAME, 2, [member(ME, "a"), member(ME, "b")])

    assert [d.admitted for d in decisions] == [True, True]
    assert decisions[0].freed == 2
    assert await holders(store) == {member(ME, "a"), member(ME, "b")}


async def test_releasing_many_members_frees_each(store: Store) -> None:
    await alive(store, ME)
    asked = [member(ME, f"j{i}") for i in range(3)]
    await limits.take_slots(store, NAME, 3, asked)

    await limits.release_slots(store, NAME, asked[:2])
    await limits.release_slots(store, NAME, asked[:2])  # idempotent

    assert await holders(store) == {asked[2]}


async def test_a_window_grants_as_many_as_it_has_room_for(store: Store) -> None:
    first = await limits.take_window(store, NAME, 5, LONG, 3)
    second = await limits.take_window(store, NAME, 5, LONG, 3)
    third = await limits.take_window(store, NAME, 5, LONG, 3)

    assert (first.granted, first.level) == (3, 3)
    assert (second.granted, second.level) == (2, 5)
    assert (third.admitted, third.granted, third.level) == (False, 0, 5)


async def test_a_bucket_grants_as_many_whole_tokens_as_it_has(store: Store) -> None:
    first = await limits.take_token(store, NAME, 5, LONG, 4)
    second = await limits.take_token(store, NAME, 5, LONG, 4)
    third = await limits.take_token(store, NAME, 5, LONG, 4)

    assert (first.granted, first.level) == (4, 1)
    assert (second.granted, second.level) == (1, 0)
    assert (third.admitted, third.granted) == (False, 0)
    assert third.retry_after is not None
    assert third.retry_after > 0
