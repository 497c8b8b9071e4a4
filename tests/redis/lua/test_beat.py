"""beat.lua: "this process is alive", and whether it had been declared dead meanwhile.

Written through ``BeatWriter`` (a blocking client: the heartbeat runs on its own thread),
called here from a worker thread as the heartbeat would. One beat is one script call in
each slot: the slot of every queue the process serves (where recovery judges it, with
the requeue) and the namespace's (the registry the dashboard and recovery read). The
stamp recovery judges by must come from Redis TIME, so every time bound below is read
from the server.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from cogworker_async.redis.beats import ALIVE, FORGOTTEN, ZOMBIE, BeatWriter
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import Requeued, as_bytes
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import (
    fetched,
    items,
    make_job,
    redis_now,
    run_raw,
)
from tests.waiting import wait_until

IDENTITY = "host:1:abc"
QUEUE = "default"
INFO: dict[str, Any] = {"hostname": "host", "pid": 1, "loop_lag": 0.002, "rss_bytes": 1 << 20}
TTL = 5.0
SHORT_TTL = 0.05
DEAD_FOR = 60.0


@pytest.fixture
def writer(redis_url: str, keys: Keys) -> Iterator[BeatWriter]:
    w = BeatWriter(redis_url, keys, IDENTITY, [QUEUE])
    yield w
    w.close()


async def beat(writer: BeatWriter, *, first: bool, ttl: float = TTL,
               info: dict[str, Any] | None = None) -> int:
    """One beat, from a thread, as the heartbeat writes it."""
    call = functools.partial(writer.beat, INFO if info is None else info, ttl, first=first)
    return await anyio.to_thread.run_sync(call)


async def stamp(store: Store, key: str, identity: str = IDENTITY) -> float | None:
    value = await store.client.hget(key, identity)
    return None if value is None else float(value)


async def markers_gone(store: Store, keys: Keys) -> bool:
    """Both alive markers expired: the namespace's and the queue slot's."""
    return await store.client.exists(keys.process(IDENTITY),
                                     keys.queue_process(QUEUE, IDENTITY)) == 0


async def declared_dead(store: Store, keys: Keys) -> set[bytes]:
    """The marks in the queue's slot: the ones recovery writes (requeue.lua)."""
    return {as_bytes(m) for m in await store.client.smembers(keys.queue_declared_dead(QUEUE))}


async def namespace_keys(store: Store, keys: Keys) -> set[bytes]:
    return {as_bytes(key) for key in await store.client.keys(f"{keys.namespace}:*")}


async def forget_everywhere(store: Store) -> bool:
    """What recovery does once it took a dead process's jobs: forget it in the queue's
    slot, then (if that worked) in the namespace's."""
    if not await store.forget(IDENTITY, QUEUE, declared_dead=True):
        return False
    return await store.forget(IDENTITY, None, declared_dead=True)


# -- what a beat writes -------------------------------------------------------------------


async def test_writes_the_alive_marker_with_its_ttl_in_every_slot(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    assert await beat(writer, first=True) == ALIVE

    marker = await store.client.get(keys.process(IDENTITY))
    assert marker is not None
    assert json.loads(marker) == INFO
    for marker in (keys.process(IDENTITY), keys.queue_process(QUEUE, IDENTITY)):
        assert TTL * 1000 - 1_000 < await store.client.pttl(marker) <= TTL * 1000


async def test_stamps_the_last_beat_by_redis_time(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    before = await redis_now(store)
    await beat(writer, first=True)
    after = await redis_now(store)

    for key in (keys.last_beat, keys.queue_last_beat(QUEUE)):
        last = await stamp(store, key)
        assert last is not None
        # TIME has microseconds; the stamp keeps six decimals.
        assert before - 1e-6 <= last <= after + 1e-6


async def test_the_callers_clock_is_only_a_fallback(store: Store, keys: Keys) -> None:
    # A worker whose clock runs a day ahead must not look alive for a day longer.
    before = await redis_now(store)
    reply = await run_raw(
        store, "beat",
        [keys.process(IDENTITY), keys.last_beat, keys.processes, keys.declared_dead,
         keys.beats],
        [IDENTITY, json.dumps(INFO), 5_000, repr(before + 86_400), "0"],
    )
    after = await redis_now(store)

    status, now = reply
    assert status == ALIVE
    assert before - 1e-6 <= float(now) <= after + 1e-6
    assert await stamp(store, keys.last_beat) == float(now)


async def test_records_the_beat_info_and_joins_the_registries(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    await beat(writer, first=True)

    assert await store.beat_info(IDENTITY) == INFO
    assert await store.registered_identities() == {IDENTITY}
    assert await store.queue_identities(QUEUE) == {IDENTITY}


async def test_without_a_beats_key_no_beats_hash_is_written(store: Store, keys: Keys) -> None:
    # A queue slot's beat (no KEYS[5]): the info is the namespace's to keep, once.
    reply = await run_raw(
        store, "beat",
        [keys.queue_process(QUEUE, IDENTITY), keys.queue_last_beat(QUEUE),
         keys.queue_identities(QUEUE), keys.queue_declared_dead(QUEUE)],
        [IDENTITY, "1", 5_000, repr(await redis_now(store)), "0"],
    )

    assert reply[0] == ALIVE
    assert await namespace_keys(store, keys) == {
        key.encode() for key in (keys.queue_process(QUEUE, IDENTITY),
                                 keys.queue_last_beat(QUEUE), keys.queue_identities(QUEUE))}
    assert await store.client.exists(keys.beats) == 0


async def test_a_writers_beat_leaves_the_info_in_the_namespace_only(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    await beat(writer, first=True)

    assert await store.client.get(keys.queue_process(QUEUE, IDENTITY)) == b"1"
    hashes = [key for key in await namespace_keys(store, keys)
              if await store.client.type(key) == b"hash"]
    assert sorted(hashes) == sorted([keys.beats.encode(), keys.last_beat.encode(),
                                     keys.queue_last_beat(QUEUE).encode()])


async def test_a_later_beat_refreshes_everything(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    await beat(writer, first=True, ttl=1.0)
    first_stamp = await stamp(store, keys.queue_last_beat(QUEUE))
    later_info = {**INFO, "loop_lag": 1.5}

    assert await beat(writer, first=False, ttl=TTL, info=later_info) == ALIVE

    assert await store.client.pttl(keys.process(IDENTITY)) > 1_000
    assert await store.client.pttl(keys.queue_process(QUEUE, IDENTITY)) > 1_000
    later_stamp = await stamp(store, keys.queue_last_beat(QUEUE))
    assert first_stamp is not None
    assert later_stamp is not None
    assert later_stamp >= first_stamp
    assert await store.beat_info(IDENTITY) == later_info


async def test_other_identities_are_untouched(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    for last_beat, marks in ((keys.last_beat, keys.declared_dead),
                             (keys.queue_last_beat(QUEUE), keys.queue_declared_dead(QUEUE))):
        await store.client.hset(last_beat, "other:2:def", "1700000000.000000")
        await store.client.sadd(marks, "other:2:def")

    await beat(writer, first=True)
    await beat(writer, first=False)

    for last_beat, marks in ((keys.last_beat, keys.declared_dead),
                             (keys.queue_last_beat(QUEUE), keys.queue_declared_dead(QUEUE))):
        assert await stamp(store, last_beat, "other:2:def") == 1_700_000_000.0
        assert await store.client.smembers(marks) == {b"other:2:def"}


SIDE_KEYS: dict[str, Callable[[Keys], str]] = {
    "beats": lambda keys: keys.beats,
    "declared_dead": lambda keys: keys.declared_dead,
    "queue_declared_dead": lambda keys: keys.queue_declared_dead(QUEUE),
}


@pytest.mark.parametrize("key", SIDE_KEYS)
async def test_a_side_key_of_the_wrong_type_does_not_stop_the_beat(
    store: Store, keys: Keys, writer: BeatWriter, key: str
) -> None:
    # Forensics and zombie detection are extras; failing the beat over them would make
    # a live process look dead, and its running jobs would be recovered and run twice.
    planted = SIDE_KEYS[key](keys)
    await store.client.set(planted, "a string, neither a hash nor a set")

    assert await beat(writer, first=True) == ALIVE
    assert await beat(writer, first=False) == ALIVE

    assert await store.client.exists(keys.process(IDENTITY)) == 1
    assert await store.client.exists(keys.queue_process(QUEUE, IDENTITY)) == 1
    assert await stamp(store, keys.queue_last_beat(QUEUE)) is not None
    assert await store.registered_identities() == {IDENTITY}
    assert await store.queue_identities(QUEUE) == {IDENTITY}
    assert await store.client.get(planted) == b"a string, neither a hash nor a set"


# -- alive or zombie ----------------------------------------------------------------------


@pytest.mark.parametrize("declared", [False, True], ids=["fresh", "declared-dead"])
async def test_a_first_beat_never_reports_a_zombie(
    store: Store, keys: Keys, writer: BeatWriter, declared: bool
) -> None:
    # A starting process has no marker and no stamp yet: that is not "forgotten".
    if declared:
        await store.client.sadd(keys.queue_declared_dead(QUEUE), IDENTITY)

    assert await beat(writer, first=True) == ALIVE

    assert await declared_dead(store, keys) == set()
    assert await beat(writer, first=False) == ALIVE


async def test_a_later_beat_reports_a_zombie_until_the_fencing_clears_the_mark(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # Were the mark removed by the beat, a lost ZOMBIE reply would leave a zombie that
    # never fences itself: its next beat would say ALIVE.
    await beat(writer, first=True)
    await store.client.sadd(keys.queue_declared_dead(QUEUE), IDENTITY)

    await beat(writer, first=False)  # its reply lost, as far as the process knows
    assert await beat(writer, first=False) == ZOMBIE
    assert await declared_dead(store, keys) == {IDENTITY.encode()}

    await store.clear_declared_dead(IDENTITY, [QUEUE])  # what Fence.fence does last
    assert await beat(writer, first=False) == ALIVE


async def test_a_mark_in_any_one_slot_makes_a_zombie(
    store: Store, keys: Keys, redis_url: str
) -> None:
    # Recovery declares a process dead queue by queue: one slot's mark is enough.
    writer = BeatWriter(redis_url, keys, IDENTITY, ["emails", "reports"])
    try:
        await beat(writer, first=True)
        await store.client.sadd(keys.queue_declared_dead("reports"), IDENTITY)

        assert await beat(writer, first=False) == ZOMBIE
    finally:
        writer.close()


async def test_keys_that_are_merely_gone_are_no_evidence_of_death(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # Markers and stamps gone without recovery's mark (Redis restarted without
    # persistence, or recovery forgot it with nothing to take): its running jobs are
    # still its own.
    await beat(writer, first=True, ttl=SHORT_TTL)
    await wait_until(lambda: markers_gone(store, keys), timeout=5)
    await store.client.hdel(keys.last_beat, IDENTITY)
    await store.client.hdel(keys.queue_last_beat(QUEUE), IDENTITY)

    assert await beat(writer, first=False) == FORGOTTEN
    assert await beat(writer, first=False) == ALIVE  # re-registered by that beat
    assert await store.client.sismember(keys.processes, IDENTITY)
    assert await store.client.sismember(keys.queue_identities(QUEUE), IDENTITY)


async def test_after_a_flush_the_next_beat_re_registers_without_fencing(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    await beat(writer, first=True)
    for key in await store.client.keys(f"{keys.namespace}:*"):
        await store.client.delete(key)

    assert await beat(writer, first=False) == FORGOTTEN
    assert await store.client.exists(keys.process(IDENTITY)) == 1
    assert await store.client.exists(keys.queue_process(QUEUE, IDENTITY)) == 1


async def test_a_later_beat_after_only_the_marker_expired_is_alive(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # Just slow (a few missed beats): its stamps are still there, nothing was recovered.
    await beat(writer, first=True, ttl=SHORT_TTL)
    await wait_until(lambda: markers_gone(store, keys), timeout=5)

    assert await beat(writer, first=False) == ALIVE

    assert await store.client.exists(keys.process(IDENTITY)) == 1
    assert await store.client.exists(keys.queue_process(QUEUE, IDENTITY)) == 1


async def test_a_reused_identity_is_not_a_zombie_for_its_predecessors_death(
    store: Store, keys: Keys, redis_url: str
) -> None:
    # A configured, stable identity (one per pod, say): the previous process with that
    # identity died and recovery took its jobs, leaving it in declared_dead. The new
    # process must not fence itself on its second beat for its predecessor's death.
    await store.client.hset(keys.queue_last_beat(QUEUE), IDENTITY,
                            repr(await redis_now(store) - 3_600))
    await fetched(store, IDENTITY, [make_job()])
    assert await store.recover(IDENTITY, QUEUE, dead_for=DEAD_FOR,
                               max_orphanings=3) == Requeued(moved=1)
    assert await forget_everywhere(store) is True
    assert await declared_dead(store, keys) == {IDENTITY.encode()}

    successor = BeatWriter(redis_url, keys, IDENTITY, [QUEUE])
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
    await wait_until(lambda: markers_gone(store, keys), timeout=5)
    for key in (keys.last_beat, keys.queue_last_beat(QUEUE)):
        last = await stamp(store, key)
        assert last is not None
        await store.client.hset(key, IDENTITY, repr(last - 3_600))


async def test_a_process_whose_jobs_were_recovered_learns_it_is_a_zombie(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    jobs = await fetched(store, IDENTITY, [make_job(), make_job()])
    await paused_past_the_threshold(store, keys, writer)

    # What a live process's recovery pass does: requeue, then forget the identity.
    assert await store.recover(IDENTITY, QUEUE, dead_for=DEAD_FOR,
                               max_orphanings=3) == Requeued(moved=2)
    assert await forget_everywhere(store) is True
    assert sorted(await items(store, keys.queue(QUEUE))) == sorted(jobs)

    assert await beat(writer, first=False) == ZOMBIE

    assert await declared_dead(store, keys) == {IDENTITY.encode()}  # until it fenced


async def test_recovery_without_forget_is_enough_to_make_it_a_zombie(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # The forget after the requeue failed (connection lost): the stamp is still there,
    # but declared_dead alone tells the paused process its jobs are gone.
    await fetched(store, IDENTITY, [make_job()])
    await paused_past_the_threshold(store, keys, writer)
    assert await store.recover(IDENTITY, QUEUE, dead_for=DEAD_FOR,
                               max_orphanings=3) == Requeued(moved=1)

    assert await beat(writer, first=False) == ZOMBIE


async def test_a_process_found_alive_by_recovery_is_not_a_zombie(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    jobs = await fetched(store, IDENTITY, [make_job()])
    await beat(writer, first=True)

    assert await store.recover(IDENTITY, QUEUE, dead_for=DEAD_FOR, max_orphanings=3) is None
    assert await store.forget(IDENTITY, QUEUE, declared_dead=True) is False
    assert await store.forget(IDENTITY, None, declared_dead=True) is False

    assert await beat(writer, first=False) == ALIVE
    assert await store.in_progress(IDENTITY, QUEUE) == jobs


async def test_a_process_forgotten_with_nothing_to_take_registers_again_unfenced(
    store: Store, keys: Keys, writer: BeatWriter
) -> None:
    # Nothing was requeued, so it is not declared dead: no job of its runs elsewhere, so
    # it has nothing to fence; it registers anew (and lists again what it runs).
    await paused_past_the_threshold(store, keys, writer)
    assert await store.recover(IDENTITY, QUEUE, dead_for=DEAD_FOR,
                               max_orphanings=3) == Requeued()
    assert await forget_everywhere(store) is True
    assert await declared_dead(store, keys) == set()

    assert await beat(writer, first=False) == FORGOTTEN

    assert await store.registered_identities() == {IDENTITY}
    assert await store.queue_identities(QUEUE) == {IDENTITY}
