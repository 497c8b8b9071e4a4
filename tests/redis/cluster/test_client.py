"""ClusterClient on a real cluster: routing by slot, the redirect rules, and no command
sent twice. The cluster is the session's (tests/conftest.py) unless a test moves a slot
or kills a node: those start their own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
import redis
import redis.asyncio

from cogworker_async.redis.cluster import ClusterClient, ClusterLane, redirect_of
from cogworker_async.redis.connection import connect
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.cluster_harness import ClusterProcess


@pytest.fixture
async def client(redis_cluster: ClusterProcess) -> AsyncIterator[ClusterClient]:
    found = connect(redis_cluster.url)
    assert isinstance(found, ClusterClient)
    yield found
    await found.aclose()


@pytest.fixture
def own_cluster() -> Iterator[ClusterProcess]:
    with ClusterProcess() as cluster:
        yield cluster


def tagged_on_each_master(cluster: ClusterProcess, prefix: str) -> list[str]:
    """One key per master (their tags hash to slots of different masters)."""
    found: dict[int, str] = {}
    for i in range(1000):
        key = f"{prefix}:{{t{i}}}:k"
        found.setdefault(cluster.port_of_slot(cluster.slot_of(key)), key)
        if len(found) == len(cluster.masters()):
            return list(found.values())
    raise AssertionError("tags did not spread")


async def test_concurrent_commands_all_succeed(client: ClusterClient, namespace: str) -> None:
    """Twenty tasks writing at once (a worker's load): every call succeeds, once."""
    key = f"{namespace}:{{load}}:list"
    failures: list[BaseException] = []

    async def writer(i: int) -> None:
        for n in range(200):
            try:
                await client.rpush(key, f"{i}:{n}")
            except Exception as exc:
                failures.append(exc)

    await asyncio.gather(*(writer(i) for i in range(20)))
    assert failures == []
    assert await client.llen(key) == 20 * 200


async def test_commands_reach_the_node_of_their_slot(
    client: ClusterClient, redis_cluster: ClusterProcess, namespace: str
) -> None:
    keys = tagged_on_each_master(redis_cluster, namespace)
    for key in keys:
        await client.set(key, key)
    for key in keys:  # read back from the node itself: it is really there
        port = redis_cluster.port_of_slot(redis_cluster.slot_of(key))
        with redis.Redis(port=port) as node:
            assert node.get(key) == key.encode()


async def test_a_pipeline_spans_nodes_and_keeps_the_order(
    client: ClusterClient, redis_cluster: ClusterProcess, namespace: str
) -> None:
    keys = tagged_on_each_master(redis_cluster, namespace)
    async with client.pipeline(transaction=False) as pipe:
        for i, key in enumerate(keys):
            pipe.set(key, str(i))
        for key in keys:
            pipe.get(key)
        replies = await pipe.execute()
    assert replies[len(keys):] == [str(i).encode() for i in range(len(keys))]


async def test_a_transaction_within_one_slot(client: ClusterClient, namespace: str) -> None:
    a, b = f"{namespace}:{{tx}}:a", f"{namespace}:{{tx}}:b"
    async with client.pipeline(transaction=True) as pipe:
        pipe.set(a, "1")
        pipe.incr(b)
        assert await pipe.execute() == [True, 1]


async def test_scan_sees_every_node(
    client: ClusterClient, redis_cluster: ClusterProcess, namespace: str
) -> None:
    keys = tagged_on_each_master(redis_cluster, namespace)
    for key in keys:
        await client.set(key, "x")
    found = {key.decode() async for key in client.scan_iter(match=f"{namespace}:*")}
    assert found == set(keys)


async def test_a_moved_slot_is_followed_and_the_command_runs_once(
    own_cluster: ClusterProcess,
) -> None:
    client = connect(own_cluster.url)
    assert isinstance(client, ClusterClient)
    try:
        key = "moving:{m}:list"
        await client.rpush(key, "before")
        slot = own_cluster.slot_of(key)
        target = next(port for _, port in own_cluster.masters()
                      if port != own_cluster.port_of_slot(slot))
        await anyio.to_thread.run_sync(own_cluster.move_slot, slot, target)
        # The client's map still names the old node: MOVED, followed, run once.
        await client.rpush(key, "after")
        lane = ClusterLane(client)
        assert await lane.call(b"LLEN", key) == 2
        assert await client.lrange(key, 0, -1) == [b"before", b"after"]
    finally:
        await client.aclose()


async def test_a_lost_node_is_raised_never_retried_and_the_map_is_read_again(
    own_cluster: ClusterProcess,
) -> None:
    client = connect(own_cluster.url)
    assert isinstance(client, ClusterClient)
    try:
        key = "failing:{f}:counter"
        await client.incr(key)
        slot = own_cluster.slot_of(key)
        own_cluster.kill_master_of_slot(slot)
        with pytest.raises((redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
            await client.incr(key)
        await anyio.to_thread.run_sync(own_cluster.wait_failover, slot)
        # The replica had the first INCR (or not: asynchronous replication); the failed
        # one was never sent again behind the caller's back.
        before = int(await client.get(key) or 0)
        assert before <= 1
        assert await client.incr(key) == before + 1
    finally:
        await client.aclose()


def test_redirects_are_read_from_redis_py_errors_and_from_raw_words() -> None:
    moved = redirect_of(redis.exceptions.MovedError("3999 127.0.0.1:7001"))
    assert moved is not None
    assert (moved.kind, moved.slot, moved.node) == (
        "MOVED", 3999, ("127.0.0.1", 7001))
    ask = redirect_of(redis.exceptions.ResponseError("ASK 12 10.0.0.2:7002"))
    assert ask is not None
    assert (ask.kind, ask.node) == ("ASK", ("10.0.0.2", 7002))
    again = redirect_of(redis.exceptions.TryAgainError("Multiple keys request"))
    assert again is not None
    assert again.kind == "TRYAGAIN"
    assert redirect_of(redis.exceptions.ResponseError("WRONGTYPE nope")) is None
    assert redirect_of(redis.exceptions.ConnectionError("gone")) is None


async def test_pubsub_hears_a_publish_sent_through_another_node(
    client: ClusterClient, namespace: str
) -> None:
    channel = f"{namespace}:{{{namespace}}}:wake"
    await client.initialize()
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(channel)
        async for message in pubsub.listen():
            if message["type"] == "subscribe":
                break
        for address in client.get_primaries():  # PUBLISH reaches every node
            await client.node(address).publish(channel, "x")
        heard = 0
        with anyio.fail_after(10):
            async for message in pubsub.listen():
                if message["type"] == "message":
                    heard += 1
                    if heard == len(client.get_primaries()):
                        break
        assert heard == len(client.get_primaries())
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def test_wake_ups_come_back_after_their_node_dies(own_cluster: ClusterProcess) -> None:
    """The subscription's node is killed and its replica promoted: the next subscribe
    reads the slot map again and lands on a live node (not the dead one, forever)."""
    from cogworker_async.redis.keys import Keys
    from cogworker_async.redis.store import Store

    store = Store(connect(own_cluster.url), Keys("wk"))
    try:
        async with store.wake_ups():
            pass
        client = store.client
        assert isinstance(client, ClusterClient)
        node = client.get_primaries()[0]
        slot = next(s for s in range(16384) if own_cluster.port_of_slot(s) == node[1])
        own_cluster.kill_master_of_slot(slot)
        await anyio.to_thread.run_sync(own_cluster.wait_failover, slot)
        for _ in range(2):  # the first try may still meet the dead node, and says so
            try:
                async with store.wake_ups() as wake_ups:
                    await client.publish(store.keys.wake_channel, "x")
                    with anyio.fail_after(10):
                        await anext(aiter(wake_ups))
                break
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                continue
        else:
            raise AssertionError("no subscription on a live node after two tries")
        assert node not in client.get_primaries()
    finally:
        await store.aclose()


@pytest.mark.parametrize("already_there", [False, True], ids=["new-queue", "queue-on-source"])
async def test_a_batch_whose_slot_migrates_mid_batch_pushes_each_job_once(
    own_cluster: ClusterProcess, already_there: bool,
) -> None:
    """enqueue_many's calls go in one round trip; when the slot is migrating, a later call
    of the batch can be redirected (MOVED, ASK, TRYAGAIN) after an earlier one ran. The
    redirected one did not run: it is sent again alone, where the slot is — never the
    whole batch reported failed (a caller's retry would push the others twice)."""
    namespace = "migrating"
    store = Store.from_url(own_cluster.url, namespace)
    queue_key = Keys(namespace).queue("q")
    slot = own_cluster.slot_of(queue_key)
    source = own_cluster.port_of_slot(slot)
    target = next(port for _, port in own_cluster.masters() if port != source)
    try:
        await store.register_queues(["q"])
        if already_there:
            await store.enqueue("q", [b"old"])
        own_cluster._call(target, "CLUSTER", "SETSLOT", slot, "IMPORTING",
                          own_cluster.node_id(source))
        own_cluster._call(source, "CLUSTER", "SETSLOT", slot, "MIGRATING",
                          own_cluster.node_id(target))
        finishing = asyncio.create_task(anyio.to_thread.run_sync(
            _finish_migration, own_cluster, slot, source, target))
        taken = await store.push_batch("q", [b"plain"], [("digest", "jid-1", 60.0, b"unique")])
        await finishing
        assert taken == [True]
        queued = await store.client.lrange(queue_key, 0, -1)
        assert sorted(queued) == sorted([b"plain", b"unique", *([b"old"] if already_there else [])])
        assert await store.push_batch("q", []) == []  # nothing to push: nothing sent
    finally:
        await store.aclose()


def _finish_migration(cluster: ClusterProcess, slot: int, source: int, target: int) -> None:
    """Move the slot's keys to ``target`` after a moment, then give it the slot."""
    time.sleep(MIGRATION_LAG)
    with redis.Redis(port=source) as client:
        while keys := client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            client.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
    for _, port in cluster.masters():
        cluster._call(port, "CLUSTER", "SETSLOT", slot, "NODE", cluster.node_id(target))


MIGRATION_LAG = 0.3
"""Seconds the slot stays half-migrated while the batch is sent."""
