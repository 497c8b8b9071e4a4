"""beat.lua: "this process is alive", and whether it had been declared dead meanwhile.

Written through ``BeatWriter`` (a blocking client: the heartbeat runs on its own thread),
called here from a worker thread as the heartbeat would. The stamp recovery judges by
must come from Redis TIME, so every time bound below is read from the server.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from cogworker_async.redis.beats import ALIVE, FORGOTTEN, ZOMBIE, BeatWriter
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import Requeued
from cogworker_async.redis.store import Store
from tests.lua.helpers import (
    fetched,
    items,
    make_job,
    redis_now,
    run_raw,
)
from tests.waiting import wait_until

IDENTITY = "host:1:abc"
INFO: dict[str, Any] = {"hostname": "host", "pid": 1, "loop_lag": 0.002, "rss_bytes": 1 << 20}
TTL = 5.0
SHORT_TTL = 0.05
DEAD_FOR = 60.0


@pytest.fixture
def writer(redis_url: str, keys: Keys) -> Iterator[BeatWriter]:
    w = BeatWriter(redis_url, keys, IDENTITY)
    yield w
    w.close()


async def beat(writer: BeatWriter, *, first: bool, ttl: float = TTL,
               info: dict[str, Any] | None = None) -> int:
    """One beat, from a thread, as the heartbeat writes it."""
    call = functools.partial(writer.beat, INFO if info is None else info, ttl, first=first)
    return await anyio.to_thread.run_sync(call)


async def stamp(store: Store, keys: Keys, identity: str = IDENTITY) -> float | None:
    value = await store.client.hget(keys.last_beat, identity)
    return None if value is None else float(value)


async def marker_gone(store: Store, keys: Keys) -> bool:
    return await store.client.exists(keys.process(IDENTITY)) == 0


async def declared_dead(store: Store, keys: Keys) -> set[bytes]:
    return set(await store.client.smembers(keys.declared_dead))


# -- what a beat writes -------------------------------------------------------------------


async def test_writes_the_alive_marker_with_its_ttl(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    assert await beat(writer, first=True) == ALIVE

    assert json.loads(await store.client.get(keys.process(IDENTITY))) == INFO
    assert TTL * 1000 - 1_000 < await store.client.pttl(keys.process(IDENTITY)) <= TTL * 1000


async def test_stamps_the_last_beat_by_redis_time(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    before = await redis_now(store)
    await beat(writer, first=True)
    after = await redis_now(store)

    last = await stamp(store, keys)
    assert last is not None
    # TIME has microseconds; the stamp keeps six decimals.
    assert before - 1e-6 <= last <= after + 1e-6


async def test_the_callers_clock_is_only_a_fallback(store: Store, keys: Keys) -> None:
    # A worker whose clock runs a day ahead must not look alive for a day longer.
    before = await redis_now(store)
    reply = await run_raw(
        store, "beat",
        [keys.process(IDENTITY), keys.last_beat, keys.in_progress_identities, keys.beats,
         keys.declared_dead],
        [IDENTITY, json.dumps(INFO), 5_000, repr(before + 86_400), "0"],
    )
    after = await redis_now(store)

    status, now = reply
    assert status == ALIVE
    assert before - 1e-6 <= float(now) <= after + 1e-6
    assert await stamp(store, keys) == float(now)


async def test_records_the_beat_info_and_joins_the_registry(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    await beat(writer, first=True)

    assert await store.beat_info(IDENTITY) == INFO
    assert await store.registered_identities() == {IDENTITY}


async def test_a_later_beat_refreshes_everything(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    await beat(writer, first=True, ttl=1.0)
    first_stamp = await stamp(store, keys)
    later_info = {**INFO, "loop_lag": 1.5}

    assert await beat(writer, first=False, ttl=TTL, info=later_info) == ALIVE

    assert await store.client.pttl(keys.process(IDENTITY)) > 1_000
    later_stamp = await stamp(store, keys)
    assert first_stamp is not None
    assert later_stamp is not None
    assert later_stamp >= first_stamp
    assert await store.beat_info(IDENTITY) == later_info


async def test_other_identities_are_untouched(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    await store.client.hset(keys.last_beat, "other:2:def", "1700000000.000000")
    await store.client.sadd(keys.declared_dead, "other:2:def")

    await beat(writer, first=True)
    await beat(writer, first=False)

    assert await stamp(store, keys, "other:2:def") == 1_700_000_000.0
    assert await declared_dead(store, keys) == {b"other:2:def"}


@pytest.mark.parametrize("key", ["beats", "declared_dead"])
async def test_a_side_key_of_the_wrong_type_does_not_stop_the_beat(
    store: Store, keys: Keys, writer: BeatWriter, key: str
) -> None:
    # Forensics and zombie detection are extras; failing the beat over them would make
    # a live process look dead, and its running jobs would be recovered and run twice.
    planted = getattr(keys, key)
    await store.client.set(planted, "a string, neither a hash nor a set")

    assert await beat(writer, first=True) == ALIVE
    assert await beat(writer, first=False) == ALIVE

    assert await store.client.exists(keys.process(IDENTITY)) == 1
    assert await stamp(store, keys) is not None
    assert await store.registered_identities() == {IDENTITY}
    assert await store.client.get(planted) == b"a string, neither a hash nor a set"


# -- alive or zombie ----------------------------------------------------------------------


@pytest.mark.parametrize("declared", [False, True], ids=["fresh", "declared-dead"])
async def test_a_first_beat_never_reports_a_zombie(
    store: Store, keys: Keys, writer: BeatWriter, declared: bool
) -> None:
    # A starting process has no marker and no stamp yet: that is not "forgotten".
    if declared:
        await store.client.sadd(keys.declared_dead, IDENTITY)

    assert await beat(writer, first=True) == ALIVE

    assert await declared_dead(store, keys) == set()
    assert await beat(writer, first=False) == ALIVE


async def test_a_later_beat_reports_a_zombie_until_the_fencing_clears_the_mark(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # Were the mark removed by the beat, a lost ZOMBIE reply would leave a zombie that
    # never fences itself: its next beat would say ALIVE.
    await beat(writer, first=True)
    await store.client.sadd(keys.declared_dead, IDENTITY)

    await beat(writer, first=False)  # its reply lost, as far as the process knows
    assert await beat(writer, first=False) == ZOMBIE
    assert await declared_dead(store, keys) == {IDENTITY.encode()}

    await store.clear_declared_dead(IDENTITY)  # what Fence.fence does last
    assert await beat(writer, first=False) == ALIVE


async def test_keys_that_are_merely_gone_are_no_evidence_of_death(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # Marker and stamp gone without recovery's mark (Redis restarted without persistence,
    # or recovery forgot it with nothing to take): its running jobs are still its own.
    await beat(writer, first=True, ttl=SHORT_TTL)
    await wait_until(lambda: marker_gone(store, keys), timeout=5)
    await store.client.hdel(keys.last_beat, IDENTITY)

    assert await beat(writer, first=False) == FORGOTTEN
    assert await beat(writer, first=False) == ALIVE  # re-registered by that beat
    assert await store.client.sismember(keys.in_progress_identities, IDENTITY)


async def test_after_a_flush_the_next_beat_re_registers_without_fencing(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    await beat(writer, first=True)
    for key in await store.client.keys(f"{keys.namespace}:*"):
        await store.client.delete(key)

    assert await beat(writer, first=False) == FORGOTTEN
    assert await store.client.exists(keys.process(IDENTITY)) == 1


async def test_a_later_beat_after_only_the_marker_expired_is_alive(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # Just slow (a few missed beats): its stamp is still there, nothing was recovered.
    await beat(writer, first=True, ttl=SHORT_TTL)
    await wait_until(lambda: marker_gone(store, keys), timeout=5)

    assert await beat(writer, first=False) == ALIVE

    assert await store.client.exists(keys.process(IDENTITY)) == 1


async def test_a_reused_identity_is_not_a_zombie_for_its_predecessors_death(
    store: Store, keys: Keys, redis_url: str
) -> None:
    # A configured, stable identity (one per pod, say): the previous process with that
    # identity died and recovery took its jobs, leaving it in declared_dead. The new
    # process must not fence itself on its second beat for its predecessor's death.
    await store.client.hset(keys.last_beat, IDENTITY, repr(await redis_now(store) - 3_600))
    await fetched(store, IDENTITY, [make_job()])
    assert await store.recover(IDENTITY, "default", dead_for=DEAD_FOR,
                               max_orphanings=3) == Requeued(moved=1)
    assert await store.forget(IDENTITY, declared_dead=True) is True

    successor = BeatWriter(redis_url, keys, IDENTITY)
    try:
        assert await beat(successor, first=True) == ALIVE
        assert await beat(successor, first=False) == ALIVE
    finally:
        successor.close()
    assert await declared_dead(store, keys) == set()


# -- with the recovery scripts ------------------------------------------------------------


async def paused_past_the_threshold(store: Store, keys: Keys, writer: BeatWriter) -> None:
    """The process beat, then stopped beating (SIGSTOP, a long GC) for an hour."""
    await beat(writer, first=True, ttl=SHORT_TTL)
    await wait_until(lambda: marker_gone(store, keys), timeout=5)
    last = await stamp(store, keys)
    assert last is not None
    await store.client.hset(keys.last_beat, IDENTITY, repr(last - 3_600))


async def test_a_process_whose_jobs_were_recovered_learns_it_is_a_zombie(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    jobs = await fetched(store, IDENTITY, [make_job(), make_job()])
    await paused_past_the_threshold(store, keys, writer)

    # What a live process's recovery pass does: requeue, then forget the identity.
    assert await store.recover(IDENTITY, "default", dead_for=DEAD_FOR,
                               max_orphanings=3) == Requeued(moved=2)
    assert await store.forget(IDENTITY, declared_dead=True) is True
    assert sorted(await items(store, keys.queue("default"))) == sorted(jobs)

    assert await beat(writer, first=False) == ZOMBIE

    assert await declared_dead(store, keys) == {IDENTITY.encode()}  # until it fenced


async def test_recovery_without_forget_is_enough_to_make_it_a_zombie(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # The forget after the requeue failed (connection lost): the stamp is still there,
    # but declared_dead alone tells the paused process its jobs are gone.
    await fetched(store, IDENTITY, [make_job()])
    await paused_past_the_threshold(store, keys, writer)
    assert await store.recover(IDENTITY, "default", dead_for=DEAD_FOR,
                               max_orphanings=3) == Requeued(moved=1)

    assert await beat(writer, first=False) == ZOMBIE


async def test_a_process_found_alive_by_recovery_is_not_a_zombie(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    jobs = await fetched(store, IDENTITY, [make_job()])
    await beat(writer, first=True)

    assert await store.recover(IDENTITY, "default", dead_for=DEAD_FOR, max_orphanings=3) is None
    assert await store.forget(IDENTITY, declared_dead=True) is False

    assert await beat(writer, first=False) == ALIVE
    assert await store.in_progress(IDENTITY) == jobs


async def test_a_process_forgotten_with_nothing_to_take_registers_again_unfenced(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # Nothing was requeued, so it is not declared dead: no job of its runs elsewhere, so
    # it has nothing to fence; it registers anew (and lists again what it runs).
    await paused_past_the_threshold(store, keys, writer)
    assert await store.recover(IDENTITY, "default", dead_for=DEAD_FOR,
                               max_orphanings=3) == Requeued()
    assert await store.forget(IDENTITY, declared_dead=True) is True
    assert await declared_dead(store, keys) == set()

    assert await beat(writer, first=False) == FORGOTTEN

    assert await store.registered_identities() == {IDENTITY}
