"""The lease of a batch block outside a worker (issue 40, defect 1's rest): its token
"<nonce>.<n|r>~<ms>" holds the batch for that long from its open and from each add
(Redis' clock, in the same step), is indexed with the held batches, and is let go of by
``batch_release`` only once lapsed (checked in the script: a renewal racing the reaper
wins). A lapsed opener's batch ends abandoned, a lapsed reopener's is sealed; the
lapsed block's next add or seal is refused (``HoldLapsed``), never silently taken.
Each run twice."""

from __future__ import annotations

from typing import cast

import pytest

from cogworker_async.redis.batches import BatchEnded, HoldLapsed
from cogworker_async.redis.part import as_bytes
from cogworker_async.redis.store import Store
from cogworker_async.worker.batch_reaper import BatchReaper
from tests.waiting import wait_until

OPENER, REOPENER, OTHER = "a1.n~60000", "b2.r~60000", "c3.r~60000"


async def held(store: Store) -> list[str]:
    return [as_bytes(cast("bytes | str", bid)).decode()
            for bid in await store.client.zrange(store.keys.batches_held, 0, -1)]


async def deadlines(store: Store, bid: str) -> dict[str, float]:
    return (await store.batches.leases([bid])).get(bid, {})


async def redis_clock(store: Store) -> float:
    return await store.dependencies.clock()


async def lapse(store: Store, bid: str, token: str) -> None:
    """As if ``token``'s block had not been heard of for longer than its lease."""
    found = await deadlines(store, bid)
    found[token] = 1.0
    await store.client.hset(store.keys.batch(bid), "leases",
                            " ".join(f"{t}={d}" for t, d in found.items()))


async def test_an_open_and_each_add_hold_the_batch_for_the_lease(store: Store) -> None:
    await store.batches.open("b", token=OPENER)
    assert await held(store) == ["b"]
    first = (await deadlines(store, "b"))[OPENER]
    assert abs(first - (await redis_clock(store) + 60)) < 5
    await lapse(store, "b", OPENER)
    for _ in range(2):
        await store.batches.add("b", ["j1"], token=OPENER)
    assert abs((await deadlines(store, "b"))[OPENER] - (await redis_clock(store) + 60)) < 5
    await store.batches.leave("b", ["j1"], token=OPENER)  # renews too
    assert await store.batches.seal("b", token=OPENER) == "success"
    assert await held(store) == []
    assert await deadlines(store, "b") == {}


async def test_a_lease_not_lapsed_is_kept_and_a_lapsed_opener_abandons(store: Store) -> None:
    await store.batches.open("parent", token="outside")
    await store.batches.open("child", parent="parent", token=OPENER)
    await store.batches.add("child", ["j1"], token=OPENER)
    assert await store.batches.seal("parent", token="outside") == "running"
    # The reaper read it lapsed, the block renewed since: the script's check wins.
    assert await store.batches.release("child", [OPENER], "parent") == "open"
    assert (await store.batches.read("child")).fields["holders"] == OPENER  # type: ignore[union-attr]
    await lapse(store, "child", OPENER)
    for _ in range(2):
        assert await store.batches.release("child", [OPENER], "parent") == "abandoned"
    assert await held(store) == ["child"]  # marked: kept until the relay repairs it
    assert (await store.batches.read("parent")).fields["state"] == "success"  # type: ignore[union-attr]
    with pytest.raises(HoldLapsed, match="LAPSED"):
        await store.batches.add("child", ["j2"], token=OPENER)
    for _ in range(2):
        with pytest.raises(HoldLapsed, match="LAPSED"):
            await store.batches.seal("child", token=OPENER)
    assert issubclass(HoldLapsed, BatchEnded)
    record = await store.batches.read("child")
    assert record is not None
    assert record.pending == 1  # the reaper cancels it, not this script


async def test_a_lapsed_reopener_is_let_go_and_the_live_one_goes_on(store: Store) -> None:
    await store.batches.open("b", token="outside")
    await store.batches.add("b", ["j1"])
    await store.batches.seal("b", token="outside")
    await store.batches.open("b", token=REOPENER, reopen=True)
    await store.batches.open("b", token=OTHER, reopen=True)
    await lapse(store, "b", REOPENER)
    assert await store.batches.release("b", [REOPENER, OTHER], None) == "running"
    fields = (await store.batches.read("b")).fields  # type: ignore[union-attr]
    assert (fields["holders"], fields["sealed"]) == (OTHER, "0")
    assert set(await deadlines(store, "b")) == {OTHER}
    with pytest.raises(HoldLapsed):
        await store.batches.add("b", ["j2"], token=REOPENER)
    assert await store.batches.add("b", ["j3"], token=OTHER) == ["j3"]
    await lapse(store, "b", OTHER)
    assert await store.batches.release("b", [OTHER], None) == "running"  # sealed
    assert (await store.batches.read("b")).fields["sealed"] == "1"  # type: ignore[union-attr]
    assert await held(store) == ["b"]  # marked: kept until the relay repairs it


async def test_the_reaper_lets_go_of_lapsed_leases_only(store: Store) -> None:
    for bid, token in (("a", "d4.n~60000"), ("b", "e5.n~60000"), ("c", "f6.r~60000"),
                       ("d", "plain")):
        await store.batches.open(bid, token=token)
        await store.batches.add(bid, [f"{bid}-never-pushed"], token=token)
    await lapse(store, "a", "d4.n~60000")
    reaper = BatchReaper(store, "me:9:z")
    assert await reaper.reap() == 1
    states = {bid: (await store.batches.read(bid)).fields["state"]  # type: ignore[union-attr]
              for bid in "abcd"}
    assert states == {"a": "abandoned", "b": "open", "c": "open", "d": "open"}
    assert (await store.batches.read("a")).cancelled == 1  # type: ignore[union-attr]
    assert sorted(await held(store)) == ["b", "c"]
    assert await reaper.reap() == 0


async def test_a_short_lease_lapses_on_redis_clock(store: Store) -> None:
    await store.batches.open("b", token="a7.n~200")
    reaper = BatchReaper(store, "me:9:z")
    assert await reaper.reap() == 0
    before = await redis_clock(store)

    async def lapsed() -> bool:
        return await redis_clock(store) > before + 0.3
    await wait_until(lapsed, timeout=5)
    assert await reaper.reap() == 1
    assert (await store.batches.read("b")).fields["state"] == "abandoned"  # type: ignore[union-attr]
