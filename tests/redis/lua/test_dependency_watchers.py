"""A parent's watchers (dep_watch.lua, its watchers set), the sweep of a watched parent's
record (sweep_records.lua) and a result that cannot be passed (dep_apply.lua): issue 40,
defects 22 (a fan-out costs the same per dependent, however many), 4 (a parent queued
past the records' bound keeps its dependents) and 15 (a child never runs with None in
place of a result it was promised)."""

from __future__ import annotations

import json

from cogworker_async.jobs.status import LIVE_TTL, Ended
from cogworker_async.redis.batches import parse_note
from cogworker_async.redis.dependencies import Parent, Watcher
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import make_job, redis_now
from tests.redis.lua.test_dependencies import (
    CHILDREN,
    IDENTITY,
    PARENTS,
    child,
    parent,
    queued,
    relay,
    run,
    state,
    taken,
)


async def _record_text(store: Store, who: Parent) -> bytes:
    return bytes(await store.client.hget(store.keys.live_records(who.queue), who.jid))


async def test_a_fan_out_writes_the_parents_record_once_not_per_dependent(
    store: Store, keys: Keys,
) -> None:
    """Each watch adds one member to a set: the record, rewritten by every watch when it
    named them all, stays the size it was (a fan-out of 10,000 was quadratic)."""
    who = await parent(store)
    await store.dependencies.watch(who, Watcher(CHILDREN, "kid-0"))
    size = len(await _record_text(store, who))
    for n in range(1, 300):
        assert await store.dependencies.watch(who, Watcher(CHILDREN, f"kid-{n}")) == (
            "watching", "")
    assert await store.dependencies.watch(who, Watcher(CHILDREN, "kid-7")) == ("watching", "")
    assert len(await _record_text(store, who)) == size
    assert await store.client.scard(keys.watchers(PARENTS, who.jid)) == 300


async def test_every_watcher_in_the_set_hears_the_end_once_and_leaves_it(
    store: Store, keys: Keys,
) -> None:
    who = await parent(store)
    raws = [await child(store, [who], jid=f"kid-{n}") for n in range(50)]
    for n in range(50):
        await store.dependencies.arm(CHILDREN, f"kid-{n}", [who])
    await run(store, who)
    [note] = await store.batches.notes(PARENTS)
    parsed = parse_note(note)
    assert parsed is not None
    assert parsed.watchers == "*"
    await relay(store)
    assert sorted(await queued(store)) == sorted(raws)
    assert not await store.client.exists(keys.watchers(PARENTS, who.jid))


async def test_a_note_relayed_after_its_parent_was_retried_leaves_the_set_for_its_next_end(
    store: Store,
) -> None:
    """Retried from dead before its death was relayed: the jobs watching it hear how
    the run they wait for ends, not the death before it."""
    who = await parent(store)
    await child(store, [who], policy="cancel")
    await store.dependencies.arm(CHILDREN, "kid", [who])
    raw = await _dies_and_comes_back(store, who)
    await relay(store)  # the death's note: the parent is alive again
    assert await state(store, "kid") == "waiting"
    await run(store, who)
    await relay(store)
    assert await state(store, "kid") == "queued"
    assert raw


async def _dies_and_comes_back(store: Store, who: Parent) -> bytes:
    from tests.redis.lua.test_dependencies import die

    await die(store, who)
    [member] = await store.client.zrange(store.keys.dead(PARENTS), 0, 0)
    assert await store.promote(PARENTS, "dead", [(member, member)]) == 1  # by hand
    return bytes(member)


async def test_a_watchers_key_of_another_type_falls_back_to_the_record(
    store: Store, keys: Keys,
) -> None:
    who = await parent(store)
    await store.client.set(keys.watchers(PARENTS, who.jid), "a co-tenant's")
    raw = await child(store, [who])
    assert await store.dependencies.arm(CHILDREN, "kid", [who]) == "waiting"
    await run(store, who)
    await relay(store)
    assert await queued(store) == [raw]
    assert await store.client.get(keys.watchers(PARENTS, who.jid)) == b"a co-tenant's"


async def _past_bound(store: Store, who: Parent) -> None:
    live = store.keys.live_records(who.queue)
    parts = (await store.client.hget(live, who.jid)).decode().split("\t")
    parts[3] = "1000"  # its bound long passed (a queue paused 14 days)
    await store.client.hset(live, who.jid, "\t".join(parts))


async def test_the_sweep_keeps_a_watched_parents_record_past_its_bound(
    store: Store, keys: Keys,
) -> None:
    who = await parent(store)
    raw = await child(store, [who])
    await store.dependencies.arm(CHILDREN, "kid", [who])
    await _past_bound(store, who)

    assert await store.sweep_records(PARENTS) == ("0", 0)
    bound = float((await _record_text(store, who)).split(b"\t")[3])
    assert abs(bound - (await redis_now(store) + LIVE_TTL)) < 5
    await run(store, who)
    await relay(store)
    assert await queued(store) == [raw]


async def test_the_sweep_drops_a_parents_record_no_one_watches_any_more(
    store: Store, keys: Keys,
) -> None:
    who = await parent(store)
    await child(store, [who])
    await store.dependencies.arm(CHILDREN, "kid", [who])
    await store.client.delete(keys.watchers(PARENTS, who.jid))  # all told, say
    await _past_bound(store, who)
    assert await store.sweep_records(PARENTS) == ("0", 1)


async def _taking(store: Store, who: Parent, tail: bytes = b',"x"],"kwargs":{}}') -> None:
    head = b'{"jid":"kid","class":"send_email","args":['
    assert await store.dependencies.wait(CHILDREN, "kid", head, [who], takes_result_of=who,
                                         tail=tail, name="send_email")
    await store.dependencies.arm(CHILDREN, "kid", [who], takes_result_of=who)


async def _dead_entry(store: Store) -> dict[str, object]:
    [entry] = await store.client.zrange(store.keys.dead(CHILDREN), 0, -1)
    found: dict[str, object] = json.loads(entry)
    return found


async def test_a_parent_that_kept_no_result_files_the_child_dead_saying_so(
    store: Store,
) -> None:
    who = await parent(store)
    await _taking(store, who)
    await run(store, who)  # succeeded, keeping no result
    await relay(store)
    assert await queued(store) == []
    assert await state(store, "kid") == "dead"
    entry = await _dead_entry(store)
    assert entry["error_class"] == "ParentResultMissing"
    assert "kid" in str(entry["error_message"])
    assert who.jid in str(entry["error_message"])
    assert entry["args"] == [None, "x"]  # readable
    # and saying whose result the null stands for: retried, a worker refuses it
    assert entry["missing_result_of"] == who.jid


async def test_a_result_that_takes_the_child_over_the_limit_files_it_dead_saying_so(
    store: Store,
) -> None:
    who = await parent(store)
    await _taking(store, who)
    await run(store, who, Ended(result=json.dumps("y" * 5000).encode()))
    await relay(store, max_bytes=2000)
    assert await queued(store) == []
    entry = await _dead_entry(store)
    assert entry["error_class"] == "ParentResultTooLarge"
    assert "max_payload_bytes (2000)" in str(entry["error_message"])
    assert entry["args"] == [None, "x"]
    assert entry["missing_result_of"] == who.jid


async def test_a_parent_that_ended_before_the_watch_without_a_result_is_said_too(
    store: Store,
) -> None:
    who = await parent(store)
    await run(store, who)
    head = b'{"jid":"kid","class":"send_email","args":['
    assert await store.dependencies.wait(CHILDREN, "kid", head, [who], takes_result_of=who,
                                         tail=b'],"kwargs":{}}')
    assert await store.dependencies.arm(CHILDREN, "kid", [who], takes_result_of=who) == "dead"
    assert (await _dead_entry(store))["error_class"] == "ParentResultMissing"


async def test_the_sweep_closes_a_watched_parent_that_vanished_and_tells_its_watchers(
    store: Store, keys: Keys,
) -> None:
    """Its queue cleared by hand: nothing will ever move the parent. Its record is not
    renewed for its watchers but closed cancelled, which notes that end: the child
    follows on_parent_failure (cancel)."""
    who = await parent(store)
    await child(store, [who])
    await store.dependencies.arm(CHILDREN, "kid", [who])
    await store.client.delete(keys.queue(PARENTS))  # cleared
    await _past_bound(store, who)

    assert await store.sweep_records(PARENTS) == ("0", 1)
    assert await store.client.hexists(keys.live_records(PARENTS), who.jid) == 0
    assert await state(store, who.jid, PARENTS) == "cancelled"
    assert 0 < await store.client.ttl(keys.record(PARENTS, who.jid)) <= store.keep_status
    await relay(store)
    assert await state(store, "kid") == "cancelled"
    assert await store.sweep_records(PARENTS) == ("0", 0)  # safe to run twice


async def test_the_sweep_keeps_a_watched_parent_while_something_can_move_it(
    store: Store, keys: Keys,
) -> None:
    """Scheduled with the schedule there, running with its process's list there: kept;
    running with its process's list gone (deleted by hand): closed."""
    who = await parent(store)
    await child(store, [who])
    await store.dependencies.arm(CHILDREN, "kid", [who])
    await taken(store, who)  # running on IDENTITY's list
    await _past_bound(store, who)
    assert await store.sweep_records(PARENTS) == ("0", 0)
    assert await state(store, who.jid, PARENTS) == "running"

    await store.client.delete(keys.in_progress(PARENTS, IDENTITY))
    await _past_bound(store, who)
    assert await store.sweep_records(PARENTS) == ("0", 1)
    assert await state(store, who.jid, PARENTS) == "cancelled"

    later = Parent(PARENTS, "later")
    await store.schedule(PARENTS, [make_job(PARENTS, jid="later")], delay=3600,
                         jids=["later"])
    await store.dependencies.watch(later, Watcher(CHILDREN, "kid-2"))
    await _past_bound(store, later)
    assert await store.sweep_records(PARENTS) == ("0", 0)
    assert await state(store, "later", PARENTS) == "scheduled"
