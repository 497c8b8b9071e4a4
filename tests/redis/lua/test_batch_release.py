"""batch_release, and the holder index the batch scripts keep (``batches_held``): the
blocks of a gone process are let go of, a batch its dead opener held ends abandoned
(its parent goes on), a reopener's is sealed, a live holder is kept; ``cancel_batch``'s
release ends a batch whoever holds it. Each run twice."""

from __future__ import annotations

from typing import cast

from cogworker_async.redis.part import as_bytes
from cogworker_async.redis.store import Store
from cogworker_async.worker.batch_reaper import BatchReaper

DEAD, LIVE = "n1.n@dead:1:a", "n2.r@live:2:b"


async def held(store: Store) -> list[str]:
    return [as_bytes(cast("bytes | str", bid)).decode()
            for bid in await store.client.zrange(store.keys.batches_held, 0, -1)]


async def test_a_dead_opener_is_let_go_of_and_its_batch_abandoned(store: Store) -> None:
    await store.batches.open("parent", token="outside")
    await store.batches.open("child", parent="parent", token=DEAD)
    assert await store.batches.seal("parent", token="outside") == "running"  # its child
    assert await held(store) == ["child"]
    for _ in range(2):
        assert await store.batches.release("child", [DEAD], "parent") == "abandoned"
    assert await held(store) == ["child"]  # marked: kept until the relay repairs it
    assert (await store.batches.read("child")).fields["orphans"] == "1"  # type: ignore[union-attr]
    assert await store.batches.read("parent") is not None
    assert (await store.batches.read("parent")).fields["state"] == "success"  # type: ignore[union-attr]


async def test_a_dead_reopener_is_let_go_and_the_live_one_kept(store: Store) -> None:
    await store.batches.open("b", token="outside")
    await store.batches.add("b", ["j1"])
    await store.batches.seal("b", token="outside")
    await store.batches.open("b", token=LIVE, reopen=True)
    await store.batches.open("b", token="n3.r@dead:1:a", reopen=True)
    assert await store.batches.release("b", ["n3.r@dead:1:a"], None) == "running"
    fields = (await store.batches.read("b")).fields  # type: ignore[union-attr]
    assert (fields["holders"], fields["sealed"]) == (LIVE, "0")
    assert await held(store) == ["b"]
    assert await store.batches.seal("b", token=LIVE) == "running"
    assert await held(store) == ["b"]  # marked: kept until the relay repairs it
    fields = (await store.batches.read("b")).fields  # type: ignore[union-attr]
    assert (fields["sealed"], fields["orphans"]) == ("1", "2")  # the seal bumped the mark


async def test_release_of_every_holder_seals_any_batch(store: Store) -> None:
    await store.batches.open("b", token=LIVE)
    await store.batches.add("b", ["j1"])
    for _ in range(2):
        assert await store.batches.release("b", None, None) == "running"
    assert await store.batches.apply("b", [("j1", "cancelled")]) == "complete"
    assert await store.batches.release("b", None, None) == "complete"
    assert await store.batches.release("missing", None, None) is None


async def test_the_reaper_judges_by_the_alive_marker_and_the_last_beat(store: Store) -> None:
    keys = store.keys
    await store.client.set(keys.process("live:2:b"), "{}", px=60_000)
    await store.client.hset(keys.last_beat, "stopping:3:c", "1")  # not forgotten yet
    for bid, token in (("a", DEAD), ("b", LIVE), ("c", "n4.n@stopping:3:c"),
                       ("d", "n5.n@me:9:z"), ("e", "plain")):
        await store.batches.open(bid, token=token)
        await store.batches.add(bid, [f"{bid}-never-pushed"])
    reaper = BatchReaper(store, "me:9:z")
    assert await reaper.reap() == 2  # dead's, and this process's own that no block holds
    states = {bid: (await store.batches.read(bid)).fields["state"]  # type: ignore[union-attr]
              for bid in "abcde"}
    assert states == {"a": "abandoned", "b": "open", "c": "open", "d": "abandoned",
                      "e": "open"}
    assert (await store.batches.read("a")).cancelled == 1  # type: ignore[union-attr]
    assert sorted(await held(store)) == ["b", "c"]
    assert await reaper.reap() == 0


# -- batch_repair: the relay's repair of a batch it let go of a dead block of -------------


async def test_release_of_every_holder_marks_nothing(store: Store) -> None:
    await store.batches.open("b", token=LIVE)
    assert await store.batches.release("b", None, None) == "success"
    assert "orphans" not in (await store.batches.read("b")).fields  # type: ignore[union-attr]
    assert await held(store) == []


async def test_a_marked_batch_is_repaired_once_no_block_holds_it(store: Store) -> None:
    await store.batches.open("b", token="outside")
    await store.batches.add("b", ["pushed", "never-pushed"])
    await store.batches.seal("b", token="outside")
    await store.batches.open("b", token=LIVE, reopen=True)
    await store.batches.open("b", token="n3.r@dead:1:a", reopen=True)
    await store.batches.release("b", ["n3.r@dead:1:a"], None)
    state, holders, mark = await store.batches.marked("b")
    assert (state, holders, mark) == ("running", LIVE, "1")
    # a live block holds it: it may be between joining a member and pushing it
    assert await store.batches.repair("b", mark, "running", ["never-pushed"]) == "retry"
    assert await store.batches.seal("b", token=LIVE) == "running"
    state, holders, mark = await store.batches.marked("b")
    assert (state, holders, mark) == ("running", "", "2")
    for _ in range(2):  # the second run finds the mark gone: nothing written
        assert await store.batches.repair("b", mark, "running", ["never-pushed"]) in (
            "running", "retry")
    record = await store.batches.read("b")
    assert record is not None
    assert (record.pending, record.cancelled, "orphans" in record.fields) == (1, 1, False)
    assert await held(store) == []
    assert await store.batches.apply("b", [("pushed", "succeeded")]) == "complete"


async def test_a_repair_read_before_a_block_reopened_pushed_and_sealed_is_refused(
    store: Store,
) -> None:
    """The relay read the batch free (mark 1), then a block reopened it, joined a member,
    the relay found no record for it, the block pushed it and sealed: that member must
    not count cancelled (the seal bumped the mark: the repair is refused)."""
    await store.batches.open("b", token="n1.n@dead:1:a")
    await store.batches.add("b", ["a"])
    await store.batches.open("b", token=LIVE, reopen=True)
    await store.batches.release("b", ["n1.n@dead:1:a"], None)
    await store.batches.seal("b", token=LIVE)
    state, _, mark = await store.batches.marked("b")  # the relay reads it free
    await store.batches.open("b", token="n4.r@live:2:b", reopen=True)
    await store.batches.add("b", ["b-member"], token="n4.r@live:2:b")
    await store.batches.seal("b", token="n4.r@live:2:b")  # after pushing it
    assert await store.batches.repair("b", mark, state or "", ["a", "b-member"]) == "retry"
    record = await store.batches.read("b")
    assert record is not None
    assert (record.pending, record.cancelled) == (2, 0)
    assert await held(store) == ["b"]


async def test_a_repair_of_an_abandoned_batch_or_of_none(store: Store) -> None:
    await store.batches.open("b", token=DEAD)
    await store.batches.add("b", ["never-pushed"])
    assert await store.batches.release("b", [DEAD], None) == "abandoned"
    state, _, mark = await store.batches.marked("b")
    assert await store.batches.repair("b", mark, state or "", ["never-pushed"]) == "abandoned"
    record = await store.batches.read("b")
    assert record is not None
    assert (record.pending, record.cancelled) == (0, 1)
    assert await held(store) == []
    await store.client.zadd(store.keys.batches_held, {"gone": 1})  # its keys expired
    assert await store.batches.repair("gone", "1", "running", []) is None
    assert await held(store) == []
