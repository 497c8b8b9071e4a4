"""One shard away (down, no replica to take over; a cluster with
``cluster-require-full-coverage no`` keeps serving the other slots): the dead processes'
jobs on the other shards are still recovered.

Before, the judging was all or nothing: a recovering process whose beat failed in any
slot judged nobody, anywhere, until all its beats had succeeded for orphan_threshold, and
a pass stopped at the first node it could not reach. So one shard down left every dead
process's jobs on every healthy shard where they were, for as long as it was down."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cogworker_async.redis.beats import BeatWriter
from cogworker_async.redis.errors import ConnectionLost
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings
from cogworker_async.worker.heartbeat import Heartbeat
from cogworker_async.worker.recovery import Recovery
from tests.cluster_harness import ClusterProcess
from tests.waiting import wait_until

INTERVAL, THRESHOLD = 0.3, 1.5
"""The observer's beat interval, and the orphan threshold (seconds)."""


@pytest.fixture
def own_cluster() -> Iterator[ClusterProcess]:
    # A node timeout far past the test: the killed node is never marked failed, so the
    # cluster does not go down as a whole (as with require-full-coverage no).
    with ClusterProcess(replicas=0, node_timeout_ms=60_000) as cluster:
        yield cluster


def pick_queues(cluster: ClusterProcess, keys: Keys) -> tuple[str, str, int]:
    """(a queue on a node that stays, a queue on the node to kill, that node's port);
    the namespace's slot is on a node that stays."""
    namespace_port = cluster.port_of_slot(cluster.slot_of(keys.processes))
    away_port = next(port for _, port in cluster.masters() if port != namespace_port)
    healthy = away = None
    for i in range(10_000):
        name = f"q{i}"
        port = cluster.port_of_slot(cluster.slot_of(keys.queue(name)))
        if port == away_port:
            away = away or name
        else:
            healthy = healthy or name
        if healthy and away:
            return healthy, away, away_port
    raise AssertionError("no spread")


async def test_a_dead_process_jobs_on_the_other_shards_are_recovered(
    own_cluster: ClusterProcess, namespace: str,
) -> None:
    keys = Keys(namespace)
    healthy, away, away_port = pick_queues(own_cluster, keys)
    store = Store.from_url(own_cluster.url, namespace)
    victim = BeatWriter(own_cluster.url, keys, "victim", [healthy, away], timeout=1.0)
    observer = BeatWriter(own_cluster.url, keys, "observer", [healthy, away], timeout=1.0)
    heartbeat = Heartbeat(observer, interval=INTERVAL, ttl=THRESHOLD, describe=dict,
                          current_jobs=list, on_zombie=lambda: None)
    settings = Settings(queues=[healthy, away], heartbeat_interval=INTERVAL,
                        orphan_threshold=THRESHOLD)
    recovery = Recovery(store, settings, "observer",
                        may_judge=lambda queue: heartbeat.steady_in(queue, THRESHOLD))
    try:
        # The victim beats once, takes a job from each queue, and dies (beats no more).
        victim.beat({"queues": [healthy, away]}, ttl=THRESHOLD, first=True)
        for queue in (healthy, away):
            await store.enqueue(queue, [f'{{"jid":"{queue}-job"}}'.encode()])
            assert len((await store.fetch("victim", [queue], 1)).jobs) == 1
        heartbeat.beat()
        heartbeat.start()
        own_cluster.kill_master_of_slot(own_cluster.slot_of(keys.queue(away)))
        lost: list[Exception] = []

        async def recovered() -> bool:
            try:
                await recovery.recover_orphans()
            except ConnectionLost as exc:  # the killed node's slot: said, not stopping
                lost.append(exc)
            listed = await store.client.lrange(keys.queue(healthy), 0, -1)
            return listed == [f'{{"jid":"{healthy}-job"}}'.encode()]

        await wait_until(recovered, timeout=20)
        assert lost, "each pass says that a node could not be reached"
        assert await store.client.llen(keys.in_progress(healthy, "victim")) == 0
        assert heartbeat.steady_in(healthy, THRESHOLD)
        assert not heartbeat.steady_in(away, THRESHOLD)
        # A queue it does not beat in: its shard may have been away too (not judged).
        assert not heartbeat.steady_in("served-by-others", THRESHOLD)
    finally:
        heartbeat.stop()
        victim.close()
        observer.close()
        await store.aclose()
    assert away_port not in own_cluster.ports
