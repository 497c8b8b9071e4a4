"""Beats on a cluster whose node hangs (a frozen host: no reply, no refusal).

A process beats in the slot of each queue it serves. Beaten one after another, each
beat to the hung node would wait out its timeout, the other slots' alive markers would
expire, and a live process's jobs on healthy queues would be recovered — run twice.
Beaten at once, the healthy slots keep seeing it alive."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from cogworker_async.redis.beats import BeatWriter
from cogworker_async.redis.keys import Keys
from cogworker_async.worker.heartbeat import Heartbeat
from tests.clients import sync_client
from tests.cluster_harness import ClusterProcess

INTERVAL, TTL, TIMEOUT = 0.3, 2.0, 1.0


@pytest.fixture
def own_cluster() -> Iterator[ClusterProcess]:
    with ClusterProcess(replicas=0, node_timeout_ms=60_000) as cluster:
        yield cluster


def queues_on(cluster: ClusterProcess, keys: Keys, frozen: int) -> tuple[list[str], str]:
    """Two queues on the node to freeze (each of their beats waits out the timeout, one
    after another: longer than the markers' TTL), and one on another master."""
    hung: list[str] = []
    healthy = None
    for i in range(10_000):
        name = f"q{i}"
        port = cluster.port_of_slot(cluster.slot_of(keys.queue(name)))
        if port == frozen and len(hung) < 2:
            hung.append(name)
        elif port != frozen and healthy is None:
            healthy = name
        if len(hung) == 2 and healthy:
            return hung, healthy
    raise AssertionError("no spread")


def test_a_hung_node_does_not_stop_the_beats_of_the_other_slots(
    own_cluster: ClusterProcess, namespace: str
) -> None:
    keys = Keys(namespace)
    namespace_port = own_cluster.port_of_slot(own_cluster.slot_of(keys.process("x")))
    frozen_port = next(port for _, port in own_cluster.masters() if port != namespace_port)
    hung, healthy = queues_on(own_cluster, keys, frozen_port)
    writer = BeatWriter(own_cluster.url, keys, "p1", [*hung, healthy], timeout=TIMEOUT)
    heartbeat = Heartbeat(writer, interval=INTERVAL, ttl=TTL, describe=dict,
                          current_jobs=list, on_zombie=lambda: None)
    heartbeat.beat()
    heartbeat.start()
    frozen = next(server for server in own_cluster.servers if server.port == frozen_port)
    assert frozen.process is not None
    client = sync_client(own_cluster.url)
    try:
        frozen.process.send_signal(signal.SIGSTOP)
        watched_until = time.monotonic() + 3 * TTL
        seen = 0
        while time.monotonic() < watched_until:  # the invariant, sampled over 3 TTLs
            assert client.exists(keys.queue_process(healthy, "p1")) == 1
            assert client.exists(keys.process("p1")) == 1
            seen += 1
            time.sleep(0.1)  # sampling pace, not a wait for an outcome
        assert seen > 10
        assert heartbeat.last_failure is not None  # the hung slot's beats failed
    finally:
        frozen.process.send_signal(signal.SIGCONT)
        heartbeat.stop()
        writer.close()
        client.close()
