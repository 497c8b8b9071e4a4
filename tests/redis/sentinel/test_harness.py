"""The sentinel harness does what the failover tests rely on: the sentinels agree on a
master that takes writes, ``failover()`` moves the master to the replica with the data
(the smoke test of test_failover.py sees the old master demoted), ``kill_master()`` gets the replica
promoted, and a killed master comes back as a replica the sentinels know (``wait_known``)."""

from __future__ import annotations

from typing import Final

import pytest

from tests.sentinel_harness import SentinelTopology

pytestmark = pytest.mark.timeout(90)

KEY: Final = "harness:written-before"


def _write(topology: SentinelTopology, port: int, value: str) -> None:
    client = topology.client(port)
    try:
        client.set(KEY, value)
        # Acknowledged by the replica: the failover below cannot have lost it.
        assert client.wait(1, 5000) == 1
    finally:
        client.close()


def _read(topology: SentinelTopology, port: int) -> bytes | None:
    client = topology.client(port)
    try:
        value = client.get(KEY)
        assert value is None or isinstance(value, bytes)
        return value
    finally:
        client.close()


def test_failover_moves_the_master(topology: SentinelTopology) -> None:
    assert topology.url.startswith("redis+sentinel://")
    assert topology.url.count(",") == 2
    assert topology.url.endswith("/cogworker")
    first = topology.master_port()
    assert topology.role(first) == "master"
    _write(topology, first, "v1")

    old, new = topology.failover()
    assert old == first
    assert new != old
    assert topology.master_port() == new
    assert topology.role(new) == "master"
    assert _read(topology, new) == b"v1"
    client = topology.client(new)
    try:
        assert client.set(KEY, "v2")  # writable
    finally:
        client.close()
    # The sentinels demote the old master 8-10 s later (test_failover.py's smoke test
    # waits for it, with ``wait_demoted``).


def test_kill_promotes_the_replica(topology: SentinelTopology) -> None:
    first = topology.master_port()
    _write(topology, first, "v1")

    old, new = topology.kill_master()
    assert old == first
    assert new != old
    assert topology.role(old) == "down"
    assert topology.master_port() == new
    assert _read(topology, new) == b"v1"

    topology.restart_old_master_as_replica(old)
    topology.wait_known()
    _write(topology, new, "v2")  # WAIT 1: the restarted node replicates again
    assert topology.role(old) == "slave"
    assert _read(topology, old) == b"v2"
