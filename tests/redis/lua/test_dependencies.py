"""The dependency scripts (dep_wait, dep_watch, dep_apply) and the notes a watched
parent's settle script writes. Every move is run again, or out of order: a parent's end
counts once, a waiting job is released once, nothing waits forever for an end it missed."""

from __future__ import annotations

import json

import pytest

from cogworker_async.jobs.status import Ended
from cogworker_async.redis.batches import parse_note
from cogworker_async.redis.dependencies import Parent, Watcher
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Failure, Store
from cogworker_async.worker import dependents_relay
from tests.redis.lua.helpers import jid_of, make_job

IDENTITY = "host:1:abc"
PARENTS = "parents"
CHILDREN = "children"


async def parent(store: Store) -> Parent:
    raw = make_job(PARENTS)
    await store.enqueue(PARENTS, [raw])
    return Parent(PARENTS, jid_of(raw))


async def taken(store: Store, who: Parent) -> bytes:
    """``who``, fetched onto IDENTITY's in-progress list (with the others queued)."""
    key = store.keys.in_progress(who.queue, IDENTITY)
    for attempt in range(2):
        found = [r for r in await store.client.lrange(key, 0, -1) if jid_of(r) == who.jid]
        if found:
            return bytes(found[0])
        if not attempt:
            await store.fetch(IDENTITY, [who.queue], 10)
    raise AssertionError(f"{who} was never fetched")


async def run(store: Store, who: Parent, ended: Ended | None = None) -> None:
    """Fetch ``who`` and ack it (succeeded, unless ``ended`` says otherwise)."""
    raw = await taken(store, who)
    await store.ack(IDENTITY, who.queue, [(raw, who.jid, ended or Ended())])


async def die(store: Store, who: Parent) -> None:
    raw = await taken(store, who)
    await store.file_failure(IDENTITY, who.queue, raw, "dead", raw, 0.0,
                             failure=Failure(who.jid, "E: boom", 1))


async def child(store: Store, parents: list[Parent], policy: str = "cancel",
                jid: str = "kid") -> bytes:
    raw = make_job(CHILDREN, jid=jid)
    assert await store.dependencies.wait(CHILDREN, jid, raw, parents, policy=policy,  # type: ignore[arg-type]
                                         name="send_email")
    return raw


async def state(store: Store, jid: str, queue: str = CHILDREN) -> str:
    status = await store.job_status(jid, [queue])
    return status.state if status is not None else "unknown"


async def queued(store: Store, queue: str = CHILDREN) -> list[bytes]:
    return list(await store.client.lrange(store.keys.queue(queue), 0, -1))


async def relay(store: Store, max_bytes: int = 0) -> None:
    """What the notes relay does with a parent queue's notes (notes_relay.py)."""
    for raw in await store.batches.notes(PARENTS):
        note = parse_note(raw)
        assert note is not None
        await dependents_relay.tell(store, PARENTS, note, max_bytes)
    await store.batches.drop_notes(PARENTS, await store.batches.notes(PARENTS))


async def test_a_child_waits_for_every_parent_and_is_released_once(store: Store) -> None:
    first, second = await parent(store), await parent(store)
    raw = await child(store, [first, second])
    assert await state(store, "kid") == "waiting"
    assert await store.dependencies.arm(CHILDREN, "kid", [first, second]) == "waiting"

    await run(store, first)
    await relay(store)
    assert await queued(store) == []
    assert await state(store, "kid") == "waiting"

    await run(store, second)
    await relay(store)
    assert await queued(store) == [raw]
    assert await state(store, "kid") == "queued"
    # Applied again (a relay that died before dropping the notes): released once.
    for who in (first, second):
        assert await store.dependencies.apply(CHILDREN, "kid",
                                              [(who, "succeeded", "")]) == "gone"
    assert await queued(store) == [raw]
    assert await store.client.zcard(store.keys.waiting(CHILDREN)) == 0
    assert not await store.client.exists(store.keys.dep(CHILDREN, "kid"))


async def test_a_parent_that_ended_before_the_watch_says_so_and_the_child_runs(
    store: Store,
) -> None:
    done = await parent(store)
    await run(store, done)
    raw = await child(store, [done])
    assert await store.dependencies.arm(CHILDREN, "kid", [done]) == "released"
    assert await queued(store) == [raw]
    assert await store.batches.notes(PARENTS) == []  # it ended unwatched: no note


async def test_watching_twice_names_the_watcher_once(store: Store, keys: Keys) -> None:
    who = await parent(store)
    await child(store, [who])
    for _ in range(3):  # the enqueuer's arm, then the relay's after a crash
        assert await store.dependencies.watch(who, Watcher(CHILDREN, "kid")) == ("watching", "")
    await run(store, who)
    [note] = await store.batches.notes(PARENTS)
    parsed = parse_note(note)
    assert parsed is not None
    assert await store.dependencies.watchers(who, parsed.watchers) == [
        Watcher(CHILDREN, "kid")]
    assert parsed.bid == ""


@pytest.mark.parametrize(("policy", "became", "in_dead"),
                         [("cancel", "cancelled", 0), ("dead", "dead", 1), ("run", "queued", 0)])
async def test_a_dead_parent_does_what_on_parent_failure_says(
    store: Store, policy: str, became: str, in_dead: int,
) -> None:
    ok, bad = await parent(store), await parent(store)
    raw = await child(store, [ok, bad], policy=policy)
    await store.dependencies.arm(CHILDREN, "kid", [ok, bad])
    await die(store, bad)
    await relay(store)
    if policy == "run":  # it still waits for the parent that has not ended
        assert await state(store, "kid") == "waiting"
        await run(store, ok)
        await relay(store)
        assert await queued(store) == [raw]
    assert await state(store, "kid") == became
    dead = await store.client.zrange(store.keys.dead(CHILDREN), 0, -1)
    assert len(dead) == in_dead
    if in_dead:
        entry = json.loads(dead[0])
        assert entry["error_class"] == "ParentFailed"
        assert bad.jid in entry["error_message"]
        assert entry["args"] == ["a@example.com"]  # the job itself, to retry by hand
        assert "missing_result_of" not in entry  # it takes no result: retried, it runs
    if policy != "run":
        status = await store.job_status("kid", [CHILDREN])
        assert status is not None
        assert status.error is not None
        assert bad.jid in status.error


async def test_a_cancelled_child_cascades_to_its_own_dependents(store: Store) -> None:
    top = await parent(store)
    await child(store, [top], jid="middle")
    await store.dependencies.arm(CHILDREN, "middle", [top])
    bottom = make_job(CHILDREN, jid="bottom")
    assert await store.dependencies.wait(CHILDREN, "bottom", bottom,
                                         [Parent(CHILDREN, "middle")])
    await store.dependencies.arm(CHILDREN, "bottom", [Parent(CHILDREN, "middle")])

    await die(store, top)
    await relay(store)
    assert await state(store, "middle") == "cancelled"
    # middle's end is noted in its own queue's notes list, for bottom
    [note] = await store.batches.notes(CHILDREN)
    parsed = parse_note(note)
    assert parsed is not None
    assert (parsed.jid, parsed.end) == ("middle", "cancelled")
    await dependents_relay.tell(store, CHILDREN, parsed, 0)
    assert await state(store, "bottom") == "cancelled"
    assert await queued(store) == []


async def test_a_child_cancelled_while_waiting_never_runs(store: Store, keys: Keys) -> None:
    who = await parent(store)
    await child(store, [who])
    await store.dependencies.arm(CHILDREN, "kid", [who])
    assert await store.records.cancel_job(CHILDREN, "kid") == "cancelled"
    # its copy and its place in the counts go with the cancel, not at a parent's end
    assert not await store.client.exists(keys.dep(CHILDREN, "kid"),
                                         keys.dep_pending(CHILDREN, "kid"))
    assert await store.client.zcard(keys.waiting(CHILDREN)) == 0
    assert await store.client.zcard(keys.arming(CHILDREN)) == 0
    assert 0 < await store.client.ttl(keys.record(CHILDREN, "kid")) <= store.keep_status
    await run(store, who)
    await relay(store)
    assert await queued(store) == []
    assert await state(store, "kid") == "cancelled"
    assert not await store.client.exists(keys.dep(CHILDREN, "kid"))


async def test_the_result_of_the_parent_becomes_the_first_argument(store: Store) -> None:
    who = await parent(store)
    head, tail = b'{"jid":"kid","class":"send_email","args":[', b',"x"],"kwargs":{}}'
    assert await store.dependencies.wait(CHILDREN, "kid", head, [who], takes_result_of=who,
                                         tail=tail)
    await store.dependencies.arm(CHILDREN, "kid", [who], takes_result_of=who)
    await run(store, who, Ended(result=b'{"n":[1,2.5]}'))
    await relay(store)
    [raw] = await queued(store)
    assert json.loads(raw)["args"] == [{"n": [1, 2.5]}, "x"]


async def test_an_unknown_parent_counts_as_dead(store: Store) -> None:
    await child(store, [Parent(PARENTS, "never-was")])
    assert await store.dependencies.arm(CHILDREN, "kid", [Parent(PARENTS, "never-was")]) \
        == "cancelled"


async def test_an_enqueuer_that_died_before_arming_is_armed_by_the_relay(store: Store) -> None:
    who = await parent(store)
    raw = await child(store, [who])  # and then the enqueuer died: nothing watches
    await run(store, who)  # its end is noted for nobody
    assert await store.dependencies.unarmed(CHILDREN, older_than=0) == ["kid"]
    assert await store.dependencies.rearm(CHILDREN, older_than=0) == 1
    assert await queued(store) == [raw]
    assert await store.dependencies.unarmed(CHILDREN, older_than=0) == []


async def test_a_repeated_wait_is_refused_and_changes_nothing(store: Store) -> None:
    who = await parent(store)
    raw = make_job(CHILDREN, jid="kid")
    assert await store.dependencies.wait(CHILDREN, "kid", raw, [who])
    assert not await store.dependencies.wait(CHILDREN, "kid", b"other", [who])
    assert await store.client.hget(store.keys.dep(CHILDREN, "kid"), "raw") == raw


async def test_a_wrong_typed_dep_key_is_an_error_and_loses_no_parent_end(store: Store) -> None:
    who = await parent(store)
    await child(store, [who])
    await store.dependencies.arm(CHILDREN, "kid", [who])
    await store.client.delete(store.keys.dep_pending(CHILDREN, "kid"))
    await store.client.set(store.keys.dep_pending(CHILDREN, "kid"), "x")
    with pytest.raises(Exception, match="WRONGTYPE"):
        await store.dependencies.apply(CHILDREN, "kid", [(who, "succeeded", "")])
    assert await store.client.hget(store.keys.dep(CHILDREN, "kid"), "raw") is not None


async def test_the_sweep_keeps_a_waiting_jobs_record_past_its_bound(
    store: Store, keys: Keys,
) -> None:
    who = await parent(store)
    await child(store, [who])
    await store.dependencies.arm(CHILDREN, "kid", [who])
    live = keys.live_records(CHILDREN)
    parts = (await store.client.hget(live, "kid")).decode().split("\t")
    parts[3] = "1000"  # its bound long passed
    await store.client.hset(live, "kid", "\t".join(parts))
    gone = make_job(CHILDREN, jid="gone")  # a queued job whose copy vanished: dropped
    await store.enqueue(CHILDREN, [gone])
    await store.client.delete(keys.queue(CHILDREN))
    other = (await store.client.hget(live, "gone")).decode().split("\t")
    other[3] = "1000"
    await store.client.hset(live, "gone", "\t".join(other))

    assert await store.sweep_records(CHILDREN) == ("0", 1)
    assert await state(store, "kid") == "waiting"
    assert not await store.client.hexists(live, "gone")
    await run(store, who)
    await relay(store)
    assert await state(store, "kid") == "queued"


async def test_a_parent_retried_by_hand_that_dies_again_is_noted_for_new_watchers(
    store: Store,
) -> None:
    """Its first death was noted for the job watching it then; retried from dead, it may
    end again, and that end is noted anew for whoever watches it now."""
    who = await parent(store)
    await child(store, [who], jid="first")
    await store.dependencies.arm(CHILDREN, "first", [who])
    await die(store, who)
    await relay(store)
    assert await state(store, "first") == "cancelled"
    [member] = await store.client.zrange(store.keys.dead(PARENTS), 0, 0)
    assert await store.promote(PARENTS, "dead", [(member, member)]) == 1  # by hand
    await child(store, [who], jid="second")
    assert await store.dependencies.arm(CHILDREN, "second", [who]) == "waiting"
    await die(store, who)
    await relay(store)
    assert await state(store, "second") == "cancelled"
