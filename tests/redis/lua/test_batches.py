"""The batch scripts (batch_open, batch_add, batch_seal, batch_apply, batch_fired,
drop_notes) and the notes a member's own settle script writes when it ends.

A batch counts its members' ends in sets, never a counter: every test here also runs
the move again, or out of order, and checks nothing counts twice and nothing is lost."""

from __future__ import annotations

import pytest

from cogworker_async.errors import WrongTypeKey
from cogworker_async.redis.batches import BatchEnded, parse_note
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import Failure, Store
from tests.redis.lua.helpers import fetched, jid_of, make_job

IDENTITY = "host:1:abc"
QUEUE = "default"


async def fields(store: Store, bid: str) -> dict[str, str]:
    record = await store.batches.read(bid)
    assert record is not None
    return record.fields


async def firing(store: Store) -> list[str]:
    return await store.batches.firing()


async def test_members_ending_before_the_seal_fire_nothing_until_it(store: Store) -> None:
    await store.batches.open("b", description="import")
    assert await store.batches.add("b", ["j1", "j2"]) == ["j1", "j2"]

    assert await store.batches.apply("b", [("j1", "succeeded"), ("j2", "succeeded")]) == "open"
    assert await firing(store) == []  # open: its block may still add members

    assert await store.batches.seal("b") == "success"
    assert (await fields(store, "b"))["fire"] == "complete success"
    assert await firing(store) == ["b"]
    assert await store.batches.seal("b") == "success"  # again: nothing decided twice
    assert (await fields(store, "b"))["fire"] == "complete success"


async def test_an_end_applied_twice_or_for_an_unknown_jid_counts_once(store: Store) -> None:
    await store.batches.open("b")
    await store.batches.add("b", ["j1", "j2"])
    await store.batches.seal("b")

    for _ in range(3):  # a member run again, a relay that applied its notes and died
        assert await store.batches.apply("b", [("j1", "succeeded"), ("zz", "dead")]) == "running"

    record = await store.batches.read("b")
    assert record is not None
    assert (record.pending, record.succeeded, record.dead) == (1, 1, 0)
    assert await firing(store) == []
    assert await store.batches.apply("b", [("j2", "succeeded")]) == "success"


async def test_a_death_decides_on_death_once_and_the_end_is_dead_not_success(
    store: Store,
) -> None:
    await store.batches.open("b")
    await store.batches.add("b", ["j1", "j2", "j3"])
    await store.batches.seal("b")

    assert await store.batches.apply("b", [("j1", "dead")]) == "running"
    assert (await fields(store, "b"))["fire"] == "death"
    await store.batches.apply("b", [("j2", "dead")])  # a second death: not a second call
    assert (await fields(store, "b"))["fire"] == "death"
    assert await store.batches.apply("b", [("j3", "succeeded")]) == "dead"
    assert (await fields(store, "b"))["fire"] == "death complete"


async def test_a_dead_member_retried_by_hand_that_succeeds_makes_it_a_success(
    store: Store,
) -> None:
    await store.batches.open("b")
    await store.batches.add("b", ["j1"])
    await store.batches.seal("b")
    assert await store.batches.apply("b", [("j1", "dead")]) == "dead"
    await store.batches.fired("b", ["death", "complete"], None)

    assert await store.batches.apply("b", [("j1", "succeeded")]) == "success"
    assert (await fields(store, "b"))["fire"] == "success"  # complete has fired already


async def test_a_cancelled_member_ends_it_complete_without_success(store: Store) -> None:
    await store.batches.open("b")
    await store.batches.add("b", ["j1", "j2"])
    await store.batches.seal("b")
    assert await store.batches.apply("b", [("j1", "cancelled"), ("j2", "succeeded")]) == "complete"
    assert (await fields(store, "b"))["fire"] == "complete"


async def test_fired_kinds_leave_the_firing_set_and_are_not_due_again(store: Store) -> None:
    await store.batches.open("b")
    await store.batches.seal("b")
    assert await firing(store) == ["b"]

    await store.batches.fired("b", ["complete"], None)
    assert await firing(store) == ["b"]  # success still to enqueue
    await store.batches.fired("b", ["success"], None)
    await store.batches.fired("b", ["success"], None)  # again: a relay that died after it

    got = await fields(store, "b")
    assert (got["fire"], got["fired"]) == ("", "complete success")
    assert await firing(store) == []


async def test_a_child_ends_its_parent_only_once_its_callbacks_are_enqueued(
    store: Store,
) -> None:
    await store.batches.open("parent")
    await store.batches.add("parent", ["p1"])
    await store.batches.open("child", parent="parent")
    await store.batches.add("child", ["c1"])
    await store.batches.seal("child")
    await store.batches.seal("parent")
    await store.batches.apply("parent", [("p1", "succeeded")])
    assert (await fields(store, "parent"))["state"] == "running"  # its child is open

    assert await store.batches.apply("child", [("c1", "succeeded")]) == "success"
    assert (await fields(store, "parent"))["state"] == "running"  # child's callbacks first

    await store.batches.fired("child", ["complete", "success"], "parent")
    assert (await fields(store, "parent"))["state"] == "success"
    assert (await fields(store, "parent"))["fire"] == "complete success"
    record = await store.batches.read("parent")
    assert record is not None
    assert record.children == ["child"]


async def test_an_ended_batch_takes_no_members_and_a_sealed_one_must_be_reopened(
    store: Store,
) -> None:
    await store.batches.open("b")
    await store.batches.add("b", ["j1"])
    await store.batches.seal("b")
    with pytest.raises(BatchEnded, match="not open"):
        await store.batches.add("b", ["j2"])

    assert await store.batches.open("b") == "reopened"
    await store.batches.add("b", ["j2"])
    await store.batches.apply("b", [("j1", "succeeded"), ("j2", "succeeded")])
    assert await firing(store) == []  # reopened: unsealed until its block exits again
    assert await store.batches.seal("b") == "success"
    with pytest.raises(BatchEnded, match="has ended"):
        await store.batches.open("b")
    with pytest.raises(BatchEnded, match="does not exist"):
        await store.batches.open("c", parent="nobody")


async def dumps(store: Store, keys: Keys, but: str) -> dict[str, object]:
    """Every key of the namespace but ``but``, as DUMP gives it."""
    names = [as_bytes(k).decode() for k in await store.client.keys(f"{keys.namespace}*")]
    return {k: await store.client.dump(k) for k in names if k != but}


FOREIGN_AT_OPEN = {
    "batch hash": lambda k: k.batch("b"),
    "batch index": lambda k: k.batches,
    "open batch index": lambda k: k.batches_open,
    "held batch index": lambda k: k.batches_held,
    "firing set": lambda k: k.batches_firing,
    "parent batch hash": lambda k: k.batch("p"),
    "parent's children set": lambda k: k.batch_set("p", "children"),
    "parent's kids set": lambda k: k.batch_set("p", "kids"),
}
"""Every key batch_open writes (the parent's when it has one), and the firing set the
batch's end writes: a co-tenant's key of another type at any of them."""


@pytest.mark.parametrize("what", sorted(FOREIGN_AT_OPEN))
@pytest.mark.parametrize("reopen", [False, True], ids=["open", "reopen"])
async def test_a_key_of_another_type_is_refused_at_the_open_naming_it_before_any_write(
    store: Store, keys: Keys, what: str, reopen: bool,
) -> None:
    if reopen and "parent" in what:
        pytest.skip("a reopen writes nothing of the parent's")
    parent = "p" if "parent" in what else None
    if parent:
        await store.batches.open(parent, token="held")
    if reopen:
        await store.batches.open("b", parent=parent, token="first")
    key = FOREIGN_AT_OPEN[what](keys)
    before = await dumps(store, keys, but=key)
    await store.client.delete(key)
    await store.client.rpush(key, "a co-tenant's")
    with pytest.raises(WrongTypeKey, match=f"{what} .*is not a") as refused:
        await store.batches.open("b", parent=parent, token="second", reopen=reopen)
    assert refused.value.key == key
    after = await dumps(store, keys, but=key)
    assert after == before  # nothing written: no batch half made


# -- the notes a member's settle script writes -----------------------------------------


async def member(store: Store, keys: Keys, bid: str) -> bytes:
    """A job enqueued as a member of batch ``bid``, and fetched."""
    raw = make_job(QUEUE)
    await store.enqueue(QUEUE, [raw], batch=bid)
    result = await store.fetch(IDENTITY, [QUEUE], 1)
    assert [r for _, r in result.jobs] == [raw]
    return raw


async def test_every_enqueue_path_writes_the_batch_in_the_record(
    store: Store, keys: Keys,
) -> None:
    queued, scheduled, unique, many = (make_job(QUEUE) for _ in range(4))
    await store.enqueue(QUEUE, [queued], batch="b")
    await store.schedule(QUEUE, [scheduled], delay=60, batch="b")
    assert await store.enqueue_unique("digest", jid_of(unique), 60, QUEUE, unique, batch="b")
    await store.push_batch(QUEUE, [many], batch="b")
    for raw in (queued, scheduled, unique, many):
        text = as_bytes(await store.client.hget(keys.live_records(QUEUE), jid_of(raw)) or b"")
        assert b"\tbatch=b" in text, text
    plain = make_job(QUEUE)
    await store.enqueue(QUEUE, [plain])
    assert b"batch=" not in as_bytes(
        await store.client.hget(keys.live_records(QUEUE), jid_of(plain)) or b"")


async def notes(store: Store) -> list[tuple[str, str, str]]:
    found = []
    for raw in await store.batches.notes(QUEUE):
        note = parse_note(raw)
        assert note is not None
        found.append((note.bid, note.jid, note.end))
    return found


async def test_a_member_acked_writes_one_note_and_a_second_ack_none(
    store: Store, keys: Keys,
) -> None:
    raw = await member(store, keys, "b")
    assert await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))]) == 1
    assert await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))]) == 0
    assert await notes(store) == [("b", jid_of(raw), "succeeded")]
    status = await store.job_status(jid_of(raw), [QUEUE])
    assert status is not None
    assert status.state == "succeeded"


async def test_a_member_filed_dead_writes_its_note_and_a_retry_none(
    store: Store, keys: Keys,
) -> None:
    retried = await member(store, keys, "b")
    await store.file_failure(IDENTITY, QUEUE, retried, "retry", retried, 30.0,
                             failure=Failure(jid_of(retried), "E: x", 2))
    dead = await member(store, keys, "b")
    await store.file_failure(IDENTITY, QUEUE, dead, "dead", dead, 0.0,
                             failure=Failure(jid_of(dead), "E: x", 1))
    await store.file_failure(IDENTITY, QUEUE, dead, "dead", dead, 0.0,
                             failure=Failure(jid_of(dead), "E: x", 1))  # again: a no-op
    assert await notes(store) == [("b", jid_of(dead), "dead")]


async def test_a_queued_member_cancelled_writes_its_note_once(store: Store, keys: Keys) -> None:
    raw = make_job(QUEUE)
    await store.enqueue(QUEUE, [raw], batch="b")

    assert await store.cancel_job(QUEUE, jid_of(raw)) == "cancelled"
    assert await store.cancel_job(QUEUE, jid_of(raw)) == "cancelled"
    await store.fetch(IDENTITY, [QUEUE], 1)  # drops the cancelled copy: the same end
    assert await notes(store) == [("b", jid_of(raw), "cancelled")]


async def test_a_job_in_no_batch_writes_no_note(store: Store, keys: Keys) -> None:
    [raw] = await fetched(store, IDENTITY, [make_job(QUEUE)])
    await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))])
    assert await store.client.exists(keys.batch_notes(QUEUE)) == 0


async def test_applied_notes_are_dropped_and_dropping_twice_drops_nothing_more(
    store: Store, keys: Keys,
) -> None:
    first, second = await member(store, keys, "b"), await member(store, keys, "b")
    await store.ack(IDENTITY, QUEUE, [(first, jid_of(first)), (second, jid_of(second))])
    read = await store.batches.notes(QUEUE)
    assert len(read) == 2

    assert await store.batches.drop_notes(QUEUE, read[:1]) == 1
    assert await store.batches.drop_notes(QUEUE, read[:1]) == 0
    assert await store.batches.notes(QUEUE) == read[1:]


async def test_a_member_never_pushed_leaves_and_counts_for_nothing(store: Store) -> None:
    await store.batches.open("b")
    assert await store.batches.add("b", ["j1", "dup"]) == ["j1", "dup"]
    assert await store.batches.add("b", ["dup"]) == []  # a member already: joins nothing
    assert await store.batches.leave("b", ["dup"]) == 1
    assert await store.batches.leave("b", ["dup"]) == 0  # again: gone once
    await store.batches.seal("b")
    assert await store.batches.apply("b", [("j1", "succeeded")]) == "success"
    assert (await fields(store, "b"))["total"] == "1"


async def test_a_batch_counts_as_open_until_it_ends(store: Store) -> None:
    await store.batches.open("a")
    await store.batches.add("a", ["j1"])
    await store.batches.open("b")
    assert await store.batches.open_count() == 2
    await store.batches.seal("b")  # no member: ends at its seal
    await store.batches.seal("a")
    assert await store.batches.open_count() == 1  # a is running
    await store.batches.apply("a", [("j1", "dead")])
    assert await store.batches.open_count() == 0


async def test_a_batch_held_by_two_blocks_is_sealed_when_both_have_let_go(store: Store) -> None:
    await store.batches.open("b", token="outer")
    await store.batches.add("b", ["j1"])
    assert await store.batches.open("b", token="inner", reopen=True) == "reopened"
    assert await store.batches.seal("b", token="outer") == "open"  # inner still holds it
    await store.batches.apply("b", [("j1", "succeeded")])
    assert await firing(store) == []  # nothing fires while a block holds it open
    await store.batches.add("b", ["j2"])  # the inner block can still add
    assert await store.batches.seal("b", token="inner") == "running"
    assert await store.batches.seal("b", token="inner") == "running"  # again: let go once
    assert await store.batches.apply("b", [("j2", "succeeded")]) == "success"


async def test_reopening_a_batch_that_does_not_exist_is_refused(store: Store) -> None:
    with pytest.raises(BatchEnded, match="does not exist"):
        await store.batches.open("gone", reopen=True)
    assert await store.batches.read("gone") is None


async def test_an_abandoned_child_ends_its_parent_and_fires_nothing_of_its_own(
    store: Store,
) -> None:
    await store.batches.open("parent", token="p")
    await store.batches.add("parent", ["p1"])
    await store.batches.seal("parent", token="p")
    await store.batches.open("child", parent="parent", token="c")
    await store.batches.add("child", ["c1"])
    await store.batches.apply("parent", [("p1", "succeeded")])
    assert (await fields(store, "parent"))["state"] == "running"  # waits for its child

    assert await store.batches.abandon("child", "parent", token="c") == "abandoned"
    assert await store.batches.apply("child", [("c1", "cancelled")]) == "abandoned"

    assert (await fields(store, "child")).get("fire", "") == ""
    assert (await fields(store, "parent"))["state"] == "success"
    assert await store.batches.open_count() == 0


async def test_every_set_of_a_batch_not_ended_is_bounded(store: Store, keys: Keys) -> None:
    await store.batches.open("b")
    await store.batches.add("b", ["j1", "j2"])
    await store.batches.seal("b")
    await store.batches.apply("b", [("j1", "succeeded")])  # SMOVE makes the succeeded set
    for key in keys.batch_keys("b"):
        if await store.client.exists(key):
            assert await store.client.ttl(key) > 0, key


async def test_a_callback_enqueued_once_is_refused_after_its_record_has_gone(
    store: Store, keys: Keys,
) -> None:
    raw = make_job(QUEUE, jid="b-complete")
    assert await store.enqueue(QUEUE, [raw], jids=["b-complete"], chosen="once") == 1
    await store.client.hdel(keys.live_records(QUEUE), "b-complete")  # as if it ran, expired
    await store.client.delete(keys.record(QUEUE, "b-complete"))
    assert await store.enqueue(QUEUE, [raw], jids=["b-complete"], chosen="once") == -1
    assert await store.client.llen(keys.queue(QUEUE)) == 1


async def dead_member_whose_record_went(store: Store, keys: Keys) -> bytes:
    """A member of batch "b" filed dead, its end relayed, its record gone since (it is
    kept keep_status only)."""
    dead = make_job(QUEUE, bid="b")
    await store.enqueue(QUEUE, [dead], batch="b")
    await store.fetch(IDENTITY, [QUEUE], 1)
    await store.file_failure(IDENTITY, QUEUE, dead, "dead", dead, 0.0,
                             failure=Failure(jid_of(dead), "E: x", 1))
    await store.batches.drop_notes(QUEUE, await store.batches.notes(QUEUE))
    await store.client.delete(keys.record(QUEUE, jid_of(dead)))
    return dead


async def test_a_member_whose_record_went_still_notes_its_end(store: Store, keys: Keys) -> None:
    """The record made afresh, at the fetch of a member whose record expired or was
    swept, or at its retry by hand from dead after keep_status, names its batch (read
    from the payload's ``bid``): its end is noted all the same."""
    raw = make_job(QUEUE, bid="b")
    await store.enqueue(QUEUE, [raw], batch="b")
    await store.client.hdel(keys.live_records(QUEUE), jid_of(raw))  # swept
    await store.fetch(IDENTITY, [QUEUE], 1)
    await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))])
    assert await notes(store) == [("b", jid_of(raw), "succeeded")]
    await store.batches.drop_notes(QUEUE, await store.batches.notes(QUEUE))

    dead = await dead_member_whose_record_went(store, keys)
    assert await store.move_member(QUEUE, "dead", "retry", dead, dead)
    assert await store.promote(QUEUE, "retry", [(dead, dead)]) == 1
    await store.fetch(IDENTITY, [QUEUE], 1)
    await store.ack(IDENTITY, QUEUE, [(dead, jid_of(dead))])
    assert await notes(store) == [("b", jid_of(dead), "succeeded")]


async def test_an_argument_that_looks_like_a_bid_names_no_batch(store: Store, keys: Keys) -> None:
    raw = make_job(QUEUE, kwargs={"meta": {"bid": "not-a-batch"}})
    await store.enqueue(QUEUE, [raw])
    await store.client.hdel(keys.live_records(QUEUE), jid_of(raw))
    await store.fetch(IDENTITY, [QUEUE], 1)
    await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))])
    assert await notes(store) == []


async def test_a_member_retried_from_dead_after_its_record_went_still_notes_its_end(
    store: Store, keys: Keys,
) -> None:
    dead = await dead_member_whose_record_went(store, keys)
    assert await store.promote(QUEUE, "dead", [(dead, dead)]) == 1  # the dashboard's retry
    await store.fetch(IDENTITY, [QUEUE], 1)
    await store.ack(IDENTITY, QUEUE, [(dead, jid_of(dead))])
    assert await notes(store) == [("b", jid_of(dead), "succeeded")]
