"""Durable writes, on real servers: with ``durability="replica"`` an enqueue returns only
once a replica holds the job, and fails (``NotDurable``) rather than pretend when no
replica confirms; a settle that is not confirmed stays pending and is not run again;
``"aof"`` waits for the master's fsync where the server has ``WAITAOF``, and says
plainly where it does not."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Final

import pytest
import redis

from cogworker_async import App, ConfigurationError, NotDurable
from cogworker_async.redis.connection import parse_version
from cogworker_async.redis.durability import Durability
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.manager import Manager
from cogworker_async.worker.outcome import Filing
from cogworker_async.worker.reconcile import Reconciler
from cogworker_async.worker.settlement import Settler
from tests.servers import ServerProcess, server_binary
from tests.waiting import wait_until

TIMEOUT = 0.3
"""The durability timeout of these tests (seconds)."""


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """A master and its replica, in sync."""
    master = ServerProcess().start()
    replica = ServerProcess(extra=["--replicaof", "127.0.0.1", str(master.port)]).start()
    try:
        with redis.Redis(port=master.port) as client:
            wait_until_sync(lambda: _online(client.info("replication")))
        yield master, replica
    finally:
        replica.cleanup()
        master.cleanup()


def _online(replication: dict[str, object]) -> bool:
    """Has the replica finished its first sync (it acknowledges offsets only then)?"""
    replica = replication.get("slave0")
    return isinstance(replica, dict) and replica.get("state") == "online"


def wait_until_sync(condition: object, bound: float = 15.0) -> None:
    deadline = time.monotonic() + bound
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the replica never connected"
        time.sleep(0.02)


@pytest.fixture
def paused_replica(pair: tuple[ServerProcess, ServerProcess]) -> Iterator[ServerProcess]:
    """The replica, stopped (SIGSTOP) for the test: it acknowledges nothing."""
    replica = pair[1]
    assert replica.process is not None
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        yield replica
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)


def replica_store(pair: tuple[ServerProcess, ServerProcess], namespace: str,
                  timeout: float = TIMEOUT) -> Store:
    return Store.from_url(pair[0].url, namespace, durability=Durability("replica", timeout))


CONFIRMED_WITHIN: Final = 10.0
"""``durability_timeout`` of tests where the replica is up: a loaded CI machine may take
longer than ``TIMEOUT`` to confirm one write (the wait ends as soon as it does)."""


async def test_an_enqueue_returns_only_once_the_replica_holds_the_job(
    pair: tuple[ServerProcess, ServerProcess], namespace: str,
) -> None:
    store = replica_store(pair, namespace, CONFIRMED_WITHIN)
    try:
        with redis.Redis(port=pair[1].port) as on_replica:
            for count in range(1, 51):
                await store.enqueue("q", [f"job-{count}".encode()])
                # Read on the replica the moment the enqueue returned: already there.
                assert on_replica.llen(Keys(namespace).queue("q")) == count
            await store.push_batch("q", [b"batch-1", b"batch-2"])
            assert on_replica.llen(Keys(namespace).queue("q")) == 52
    finally:
        await store.aclose()


async def test_an_enqueue_no_replica_confirms_raises_not_durable(
    pair: tuple[ServerProcess, ServerProcess], paused_replica: ServerProcess,
    namespace: str,
) -> None:
    jobs = App(pair[0].url, namespace=namespace, durability="replica",
               durability_timeout=TIMEOUT)

    @jobs.job()
    async def noop() -> None:
        pass

    try:
        started = time.monotonic()
        with pytest.raises(NotDurable, match=r"no replica acknowledged it within 0\.3s"):
            await noop.enqueue()
        assert time.monotonic() - started < 5.0  # the timeout, not the socket's
    finally:
        await jobs.close()
    # Like a lost reply: the master did take it (and the caller was told it may exist).
    with redis.Redis(port=pair[0].port) as on_master:
        assert on_master.llen(Keys(namespace).queue("default")) == 1


async def test_a_settle_no_replica_confirms_stays_pending_and_the_job_is_not_run_again(
    pair: tuple[ServerProcess, ServerProcess], namespace: str,
) -> None:
    jobs = App(pair[0].url, namespace=namespace, durability="replica",
               durability_timeout=TIMEOUT, heartbeat_interval=0.2, orphan_threshold=3.0,
               recovery_interval=0.2, idle_fetch_interval=0.1, poll_interval=0.1)
    runs: list[int] = []

    @jobs.job()
    async def record(n: int) -> None:
        runs.append(n)

    replica = pair[1]
    assert replica.process is not None
    keys = Keys(namespace)
    try:
        await record.enqueue(1)
        os.kill(replica.process.pid, signal.SIGSTOP)
        try:
            async with jobs.worker() as worker:
                assert isinstance(worker, Manager)
                await wait_until(lambda: runs == [1], timeout=10)
                # The ack ran on the master but is not confirmed: it stays pending,
                # and the job is not fetched or run again meanwhile.
                await wait_until(lambda: bool(worker.ledger.pending), timeout=10)
                assert runs == [1]
                os.kill(replica.process.pid, signal.SIGCONT)
                await wait_until(lambda: not worker.ledger.pending, timeout=15)
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
    finally:
        await jobs.close()
    assert runs == [1]
    with redis.Redis(port=replica.port) as on_replica:
        in_progress = list(on_replica.scan_iter(f"{namespace}:*in_progress*"))
        assert all(on_replica.llen(k) == 0 for k in in_progress)
        assert on_replica.llen(keys.queue("default")) == 0


def test_a_durability_the_settings_do_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="durability must be None, 'replica' or 'aof'"):
        App("redis://localhost", durability="fsync")
    with pytest.raises(ValueError, match="durability_timeout"):
        App("redis://localhost", durability="replica", durability_timeout=0)


def _has_waitaof(binary: str) -> bool:
    server = ServerProcess(binary=binary).start()
    try:
        with redis.Redis(port=server.port) as client:
            info = client.info("server")
    finally:
        server.cleanup()
    version = parse_version(str(info.get("valkey_version") or info["redis_version"]))
    return "valkey_version" in info or version >= (7, 2)


async def test_aof_waits_for_the_fsync_where_the_server_has_waitaof(namespace: str) -> None:
    from cogworker_async.redis.embedded import find_binary

    binary = find_binary()
    if not _has_waitaof(binary):
        pytest.skip(f"{binary} has no WAITAOF")
    server = ServerProcess(appendonly=True, binary=binary).start()
    try:
        store = Store.from_url(server.url, namespace, durability=Durability("aof", 2.0))
        try:
            assert await store.enqueue("q", [b"one"]) == 1
        finally:
            await store.aclose()
        server.kill()  # the moment the enqueue returned: its job is in the file
        server.start()
        with redis.Redis(port=server.port) as client:
            assert client.lrange(Keys(namespace).queue("q"), 0, -1) == [b"one"]
    finally:
        server.cleanup()


async def test_aof_where_the_server_has_no_waitaof_says_so_and_writes_nothing(
    namespace: str,
) -> None:
    binary = server_binary()
    if _has_waitaof(binary):
        pytest.skip(f"{binary} has WAITAOF")
    server = ServerProcess(appendonly=True).start()
    store = Store.from_url(server.url, namespace, durability=Durability("aof", 0.5))
    try:
        with pytest.raises(ConfigurationError, match="needs WAITAOF"):
            await store.enqueue("q", [b"one"])
        with redis.Redis(port=server.port) as client:
            assert client.llen(Keys(namespace).queue("q")) == 0  # a caller's retry: no twin
    finally:
        await store.aclose()
        server.cleanup()


async def test_aof_on_a_server_whose_aof_is_off_says_so_and_writes_nothing(
    namespace: str,
) -> None:
    from cogworker_async.redis.embedded import find_binary

    binary = find_binary()
    if not _has_waitaof(binary):
        pytest.skip(f"{binary} has no WAITAOF")
    server = ServerProcess(appendonly=False, binary=binary).start()
    store = Store.from_url(server.url, namespace, durability=Durability("aof", 0.5))
    try:
        with pytest.raises(ConfigurationError, match="appendonly yes"):
            await store.push_batch("q", [b"one"])
        with redis.Redis(port=server.port) as client:
            assert client.llen(Keys(namespace).queue("q")) == 0
    finally:
        await store.aclose()
        server.cleanup()


async def test_a_late_settle_not_confirmed_is_known_to_have_run(
    pair: tuple[ServerProcess, ServerProcess], namespace: str,
) -> None:
    """A remembered failure filed late whose WAIT found no replica did run: when its
    next try finds the job off the list, that is its own doing — not a list Redis lost,
    which would list the job again and file it a second time (it would run twice)."""
    master, replica = pair
    assert replica.process is not None
    plain = Store.from_url(master.url, namespace)
    store = replica_store(pair, namespace)
    raw = b'{"jid":"j1","function":"f","args":[],"kwargs":{},"queue":"q"}'
    try:
        await plain.enqueue("q", [raw])
        assert (await plain.fetch("me", ["q"], 1)).jobs == [("q", raw)]
        ledger = Ledger(4, 4)
        reconciler = Reconciler(store, Settler(store, "me", reliable=True, ledger=ledger),
                                "me", ["q"], ledger)
        ledger.remember(raw, Filing("retry", {"jid": "j1", "retry": 1}, 30.0, False),  # type: ignore[typeddict-item]
                        queue="q")
        os.kill(replica.process.pid, signal.SIGSTOP)
        try:
            assert isinstance(await reconciler.settle_pending(), NotDurable)
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        assert raw in ledger.unsure
        await reconciler.settle_pending()  # finds it filed: a doubt for the next beat
        assert not ledger.relist_wanted
        with redis.Redis(port=master.port) as client:
            assert client.zcard(store.zset_key("q", "retry")) == 1
            assert client.llen(store.keys.in_progress("q", "me")) == 0
    finally:
        await store.aclose()
        await plain.aclose()


async def test_a_worker_whose_server_cannot_do_aof_stops_before_it_fetches(
    namespace: str,
) -> None:
    """Found before any job is taken: a worker that learned it only at its first settle
    would have kept its acks pending and died with its jobs still listed."""
    binary = server_binary()
    if _has_waitaof(binary):
        pytest.skip(f"{binary} has WAITAOF")
    server = ServerProcess(appendonly=True).start()
    jobs = App(server.url, namespace=namespace)

    @jobs.job()
    async def noop() -> None:
        pass

    try:
        await noop.enqueue()
        with pytest.raises(BaseExceptionGroup) as refused:  # the worker's task group's
            async with jobs.worker(durability="aof"):
                pass
        assert refused.group_contains(ConfigurationError, match="needs WAITAOF")
        with redis.Redis(port=server.port) as client:
            assert client.llen(Keys(namespace).queue("default")) == 1  # not fetched
    finally:
        await jobs.close()
        server.cleanup()


async def test_durability_replicas_waits_for_that_many_replicas(
    pair: tuple[ServerProcess, ServerProcess], namespace: str,
) -> None:
    """``durability_replicas=2`` sends ``WAIT 2``: with the one replica there is, the job
    is on it, but the enqueue is not confirmed (the partition case:
    tests/worker/chaos/netns/test_replica_durability.py)."""
    jobs = App(pair[0].url, namespace=namespace, durability="replica",
               durability_timeout=TIMEOUT, durability_replicas=2)

    @jobs.job()
    async def noop() -> None:
        pass

    try:
        with pytest.raises(NotDurable, match=r"1 of the 2 replicas wanted acknowledged it"):
            await noop.enqueue()
    finally:
        await jobs.close()
    with redis.Redis(port=pair[1].port) as on_replica:
        wait_until_sync(lambda: on_replica.llen(Keys(namespace).queue("default")) == 1)


def test_durability_replicas_must_be_a_positive_count() -> None:
    assert Durability("replica", 0.25, 3).command == (b"WAIT", 3, 250)
    assert Durability("aof", 0.25, 3).command == (b"WAITAOF", 1, 0, 250)
    with pytest.raises(ValueError, match="durability_replicas"):
        App("redis://localhost", durability="replica", durability_replicas=0)
    with pytest.raises(TypeError, match="durability_replicas"):
        App("redis://localhost", durability="replica", durability_replicas="all")
