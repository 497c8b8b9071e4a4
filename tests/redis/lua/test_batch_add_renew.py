"""batch_add renews the leases of the blocks enclosing the adding one (KEYS[8..], their
tokens after its own in ARGV[3]), in the same step: a block busy adding to its child
batch is alive. A token no longer holding, a batch gone, or a co-tenant's key of another
type there renews nothing and fails nothing. Each run twice."""

from __future__ import annotations

from cogworker_async.redis.store import Store

PARENT, CHILD = "a1.n~60000", "b2.n~60000"


async def deadline(store: Store, bid: str, token: str) -> float:
    return (await store.batches.leases([bid])).get(bid, {}).get(token, 0.0)


async def lapse(store: Store, bid: str, token: str) -> None:
    await store.client.hset(store.keys.batch(bid), "leases", f"{token}=1.0")


async def test_an_add_to_a_child_renews_the_enclosing_blocks_lease(store: Store) -> None:
    await store.batches.open("parent", token=PARENT)
    await store.batches.open("child", parent="parent", token=CHILD)
    await lapse(store, "parent", PARENT)
    clock = await store.dependencies.clock()
    for n in range(2):
        assert await store.batches.add("child", [f"j{n}"], token=CHILD,
                                       renew=[("parent", PARENT)]) == [f"j{n}"]
        assert abs(await deadline(store, "parent", PARENT) - (clock + 60)) < 5
    parent = await store.batches.read("parent")
    assert parent is not None
    assert (parent.fields["total"], parent.pending) == ("0", 0)  # nothing joined it


async def test_a_renewal_that_cannot_be_made_fails_nothing(store: Store) -> None:
    await store.batches.open("parent", token=PARENT)
    await store.batches.open("child", parent="parent", token=CHILD)
    await lapse(store, "parent", PARENT)
    await store.client.set(store.keys.batch("garbage"), "not a hash")
    renew = [("parent", "c3.n~60000"), ("gone", PARENT), ("garbage", PARENT)]
    for n in range(2):
        assert await store.batches.add("child", [f"j{n}"], token=CHILD,
                                       renew=renew) == [f"j{n}"]
    assert await deadline(store, "parent", PARENT) == 1.0  # not its holder's token
    assert await store.client.get(store.keys.batch("garbage")) == b"not a hash"
