"""The cluster harness itself: real slots on real masters, moved and failed over."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from tests.cluster_harness import HOST, ClusterProcess, wait_for


def cluster_client(cluster: ClusterProcess) -> RedisCluster:
    _, port = cluster.masters()[0]
    return RedisCluster(host=HOST, port=port, decode_responses=True)


@pytest.fixture
def client(redis_cluster: ClusterProcess) -> Iterator[RedisCluster]:
    redis_cluster.flushall()
    c = cluster_client(redis_cluster)
    yield c
    c.close()


def key_on_each_master(cluster: ClusterProcess) -> dict[int, str]:
    """A hash-tagged key per master port: {tag} decides the slot, the slot the master."""
    found: dict[int, str] = {}
    masters = {port for _, port in cluster.masters()}
    tag = 0
    while set(found) != masters:
        key = f"{{tag{tag}}}:job"
        found.setdefault(cluster.port_of_slot(cluster.slot_of(key)), key)
        tag += 1
    return found


def test_url_names_the_masters(redis_cluster: ClusterProcess, cluster_url: str) -> None:
    assert cluster_url.startswith("redis+cluster://")
    seeds = cluster_url.removeprefix("redis+cluster://").split(",")
    assert seeds == [f"{HOST}:{port}" for _, port in redis_cluster.masters()]
    assert len(seeds) == 3
    assert len(redis_cluster.replicas()) == 3
    assert 6379 not in redis_cluster.ports


def test_hash_tags_spread_keys_over_the_masters(
    redis_cluster: ClusterProcess, client: RedisCluster
) -> None:
    keys = key_on_each_master(redis_cluster)
    for port, key in keys.items():
        client.set(key, f"on {port}")
    for port, key in keys.items():
        assert client.get(key) == f"on {port}"
        # the key is physically on that master, not merely reachable through the client
        with redis.Redis(host=HOST, port=port, decode_responses=True) as node:
            assert node.get(key) == f"on {port}"
    assert len(set(keys)) == 3


def test_move_slot_carries_its_keys(redis_cluster: ClusterProcess, client: RedisCluster) -> None:
    slot = redis_cluster.slot_of("{moving}")
    keys = [f"{{moving}}:{i}" for i in range(250)]  # more than one MIGRATE batch
    for i, key in enumerate(keys):
        client.set(key, i)
    source = redis_cluster.port_of_slot(slot)
    target = next(port for _, port in redis_cluster.masters() if port != source)

    redis_cluster.move_slot(slot, target)

    assert redis_cluster.port_of_slot(slot) == target
    with redis.Redis(host=HOST, port=source) as node:
        assert node.cluster("COUNTKEYSINSLOT", slot) == 0
    with redis.Redis(host=HOST, port=target) as node:
        assert node.cluster("COUNTKEYSINSLOT", slot) == len(keys)
    assert [client.get(key) for key in keys] == [str(i) for i in range(len(keys))]  # via MOVED
    fresh = cluster_client(redis_cluster)
    try:
        assert fresh.mget(keys) == [str(i) for i in range(len(keys))]
    finally:
        fresh.close()


def test_writes_during_move_slot_all_land(
    redis_cluster: ClusterProcess, client: RedisCluster
) -> None:
    slot = redis_cluster.slot_of("{busy}")
    for i in range(500):
        client.set(f"{{busy}}:{i}", i)
    source = redis_cluster.port_of_slot(slot)
    target = next(port for _, port in redis_cluster.masters() if port != source)
    written: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        with cluster_client(redis_cluster) as own:
            try:
                while not stop.is_set() or len(written) < 50:
                    key = f"{{busy}}:new:{len(written)}"
                    own.set(key, "x")
                    written.append(key)
            except BaseException as error:  # reported in the test's own thread
                errors.append(error)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_for(lambda: len(written) >= 20 or bool(errors), what="writer running")
        before = len(written)
        redis_cluster.move_slot(slot, target)
        during = len(written) - before
    finally:
        stop.set()
        thread.join(10)
    assert not errors
    assert during > 0  # the writer really ran while the slot was migrating
    assert not errors
    assert redis_cluster.port_of_slot(slot) == target
    assert client.mget(written) == ["x"] * len(written)
    assert client.mget([f"{{busy}}:{i}" for i in range(500)]) == [str(i) for i in range(500)]


def test_failover_after_killing_a_master() -> None:
    # its own cluster: the session one keeps all its masters
    with ClusterProcess() as cluster:
        slot = cluster.slot_of("{doomed}")
        old = cluster.port_of_slot(slot)
        replicas_before = {port for _, port in cluster.replicas()}
        with redis.Redis(host=HOST, port=old) as node:
            node.set("{doomed}:job", "kept")
            assert node.wait(1, 5000) == 1  # the replica has it before the master dies

        assert cluster.kill_master_of_slot(slot) == old
        new = cluster.wait_failover(slot, timeout=30)

        assert new != old
        assert new in replicas_before
        assert old not in cluster.ports
        assert new in {port for _, port in cluster.masters()}
        assert len(cluster.masters()) == 3
        with cluster_client(cluster) as client:
            assert client.get("{doomed}:job") == "kept"
