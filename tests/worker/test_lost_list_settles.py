"""Settles after Redis lost this process's in-progress list (restarted without
persistence), before the relist put its jobs back: none is lost, none runs twice.

The rules (settlement.py's docstring): an Ack needs no list entry and is never listed
again; a Filing or GiveBack that finds its job missing is kept pending, the job is listed
again, and it is settled then — unless an earlier attempt of that settle lost its reply
(it did run: settled) or fencing found the job recovered elsewhere (dropped).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import redis.asyncio

from cogworker_async import App
from cogworker_async.redis.errors import LostReply
from cogworker_async.redis.store import SetName, Store
from cogworker_async.worker import handover
from cogworker_async.worker.fencing import Fence
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.outcome import Ack, Filing, GiveBack
from cogworker_async.worker.reconcile import Reconciler
from cogworker_async.worker.settlement import Settler
from tests.conftest import FAST
from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.worker.units.conftest import IDENTITY, listed, put_in_progress, raw_job, store_of

RETRY_PAUSE = 0.05
QUEUES = ["default", "critical"]
SHUTDOWN_BUDGET = 10.0
"""Seconds settle_pending_until may take (it returns as soon as nothing is pending)."""


def filing(n: int) -> Filing:
    entry = json.loads(raw_job(n))
    entry.update(retry_count=0, error_class="RuntimeError", error_message="after the loss")
    return Filing("retry", entry, 3600.0, terminal=False)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger(slots=4, concurrency=4)


class Parts:
    def __init__(self, store: Store, ledger: Ledger) -> None:
        self.ledger = ledger
        self.settler = Settler(store, IDENTITY, reliable=True, ledger=ledger)
        self.fence = Fence(store, IDENTITY, ledger, queues=QUEUES, retry_pause=RETRY_PAUSE)
        self.reconciler = Reconciler(store, self.settler, IDENTITY, QUEUES, ledger)


@pytest.fixture
async def parts(store: Store, ledger: Ledger) -> Parts:
    return Parts(store, ledger)


# -- (A) a failure settled before the relist is filed, not lost ------------------------


async def test_a_failure_whose_job_is_not_listed_is_kept_and_filed_after_the_relist(
    store: Store, parts: Parts
) -> None:
    failed = Work("default", raw_job(1))
    parts.ledger.admit(failed)  # fetched before Redis lost the list

    await parts.settler.settle(failed, filing(1))
    parts.ledger.finish(failed)

    assert parts.ledger.pending == {failed.raw: filing(1)}
    assert parts.ledger.relist_wanted
    await parts.fence.relist()
    assert await listed(store) == [failed.raw]
    assert await parts.reconciler.reconcile() == 0
    assert await listed(store) == []
    assert parts.ledger.pending == {}
    [entry] = await store.client.zrange(store.keys.retry("default"), 0, -1)
    assert json.loads(entry)["error_message"] == "after the loss"


async def test_a_give_back_whose_job_is_not_listed_goes_back_to_its_queue(
    store: Store, parts: Parts
) -> None:
    never_started = Work("critical", raw_job(1, queue="critical"))

    await parts.settler.settle(never_started, GiveBack())

    assert parts.ledger.relist_wanted
    await parts.fence.relist()
    await parts.reconciler.reconcile()
    assert await store.client.lrange(store.keys.queue("critical"), 0, -1) == [never_started.raw]
    assert await listed(store, "critical") == []


async def test_a_zero_after_a_lost_reply_means_that_attempt_settled_it(
    store: Store, redis_url: str, namespace: str, ledger: Ledger
) -> None:
    """Filed once, not twice: the first attempt ran, only its reply was lost."""

    class LosesTheFirstReply(Store):
        lost = 0

        async def file_failure(self, identity: str, queue: str, raw: bytes,
                               target: SetName, entry: bytes, delay: float,
                               **extra: Any) -> bool:
            done = await super().file_failure(identity, queue, raw, target, entry, delay,
                                                **extra)
            if not self.lost:
                self.lost += 1
                raise LostReply("Connection closed by server.")
            return done

    failed = Work("default", raw_job(1))
    await put_in_progress(store, failed.raw)
    ledger.admit(failed)
    async with store_of(LosesTheFirstReply, redis_url, namespace) as losing:
        await Settler(losing, IDENTITY, reliable=True, ledger=ledger).settle(failed, filing(1))
        assert losing.lost == 1
    assert ledger.pending == {}
    assert not ledger.relist_wanted
    assert ledger.in_flight() == set()  # settled: a relist must not list it again
    assert await store.client.zcard(store.keys.retry("default")) == 1
    assert set(ledger.doubtful) == {failed.raw}
    ledger.beat_alive(1)  # the next beat found the keys: nothing was lost
    assert ledger.doubtful == {}


async def test_a_lost_reply_then_lost_keys_settles_it_again(
    store: Store, redis_url: str, namespace: str, ledger: Ledger
) -> None:
    """A restart cuts the connection (the reply is lost) and empties Redis (the retry
    that attempt filed is gone too): the next beat's FORGOTTEN settles it again."""

    class LosesTheReplyAndTheKeys(Store):
        lost = 0

        async def file_failure(self, identity: str, queue: str, raw: bytes,
                               target: SetName, entry: bytes, delay: float,
                               **extra: Any) -> bool:
            done = await super().file_failure(identity, queue, raw, target, entry, delay,
                                                **extra)
            if not self.lost:
                self.lost += 1
                await self.client.delete(self.keys.retry(queue))  # the restart
                raise LostReply("Connection closed by server.")
            return done

    failed = Work("default", raw_job(1))
    await put_in_progress(store, failed.raw)
    ledger.admit(failed)
    parts = Parts(store, ledger)
    async with store_of(LosesTheReplyAndTheKeys, redis_url, namespace) as losing:
        await Settler(losing, IDENTITY, reliable=True, ledger=ledger).settle(failed, filing(1))
    ledger.finish(failed)
    assert set(ledger.doubtful) == {failed.raw}

    ledger.keys_lost({"default"})  # what the next beat's FORGOTTEN in its slot does
    await parts.fence.relist()
    await parts.reconciler.reconcile()
    assert ledger.pending == {}
    assert await store.client.zcard(store.keys.retry("default")) == 1
    assert await listed(store) == []


async def test_keys_lost_in_another_queue_s_slot_leave_a_doubt_settled(
    store: Store, redis_url: str, namespace: str, ledger: Ledger
) -> None:
    """On a cluster one shard can lose its keys and not another: a FORGOTTEN from the
    slot of "mail" says nothing about a failure of "default" whose reply was lost. It
    stays a doubt (settled by its lost-reply attempt): filed again, it would run twice."""

    class LosesTheReply(Store):
        lost = 0

        async def file_failure(self, identity: str, queue: str, raw: bytes,
                               target: SetName, entry: bytes, delay: float,
                               **extra: Any) -> bool:
            done = await super().file_failure(identity, queue, raw, target, entry, delay,
                                                **extra)
            if not self.lost:
                self.lost += 1
                raise LostReply("Connection closed by server.")
            return done

    failed = Work("default", raw_job(1))
    await put_in_progress(store, failed.raw)
    ledger.admit(failed)
    parts = Parts(store, ledger)
    async with store_of(LosesTheReply, redis_url, namespace) as losing:
        await Settler(losing, IDENTITY, reliable=True, ledger=ledger).settle(failed, filing(1))
    ledger.finish(failed)
    assert set(ledger.doubtful) == {failed.raw}

    ledger.keys_lost({"mail"})
    await parts.fence.relist()
    await parts.reconciler.reconcile()
    assert set(ledger.doubtful) == {failed.raw}  # still a doubt, not pending
    assert ledger.pending == {}
    assert await store.client.zcard(store.keys.retry("default")) == 1  # filed once
    assert await listed(store) == []


async def test_a_zero_after_a_connection_that_could_not_be_made_means_not_listed(
    store: Store, redis_url: str, namespace: str, ledger: Ledger
) -> None:
    """Nothing was sent (Redis restarting refuses connections): the 0 that follows is
    Redis having lost the list, not an earlier attempt having filed the job."""

    class RefusedFirst(Store):
        refused = 0

        async def file_failure(self, identity: str, queue: str, raw: bytes,
                               target: SetName, entry: bytes, delay: float,
                               **extra: Any) -> bool:
            if not self.refused:
                self.refused += 1
                raise redis.exceptions.ConnectionError(
                    "Error 111 connecting to 127.0.0.1:1. Connection refused.")
            return await super().file_failure(identity, queue, raw, target, entry, delay,
                                                **extra)

    failed = Work("default", raw_job(1))
    ledger.admit(failed)
    async with store_of(RefusedFirst, redis_url, namespace) as refusing:
        await Settler(refusing, IDENTITY, reliable=True, ledger=ledger).settle(failed, filing(1))
    assert ledger.pending == {failed.raw: filing(1)}
    assert ledger.relist_wanted


async def test_at_shutdown_the_relist_runs_before_the_pending_settles(
    store: Store, parts: Parts
) -> None:
    """The fence's task is gone by then: settle_pending_until relists itself."""
    failed = Work("default", raw_job(1))
    await parts.settler.settle(failed, filing(1))
    assert parts.ledger.relist_wanted

    await handover.settle_pending_until(parts.reconciler, parts.ledger,
                                        time.monotonic() + SHUTDOWN_BUDGET, parts.fence.relist)
    assert parts.ledger.pending == {}
    assert await store.client.zcard(store.keys.retry("default")) == 1
    assert await listed(store) == []


async def test_a_job_fencing_disowned_is_dropped_not_relisted(
    store: Store, parts: Parts
) -> None:
    """Recovered elsewhere while this process was paused: its settle finds nothing, and
    must not bring it back (it would run twice)."""
    recovered = Work("default", raw_job(1))
    parts.ledger.admit(recovered)
    await parts.fence.fence()  # the list does not hold it

    await parts.settler.settle(recovered, GiveBack())

    assert parts.ledger.pending == {}
    assert not parts.ledger.relist_wanted
    assert parts.ledger.in_flight() == set()


# -- (B) an ack that raced the relist never lists a finished job -----------------------


async def test_an_ack_before_the_relist_leaves_no_stray_to_run_again(
    store: Store, parts: Parts
) -> None:
    """The ack ran (finding nothing: the list was lost), then the relist, then the
    processor's ``finish`` (it waited for the unique lock's release meanwhile)."""
    done = Work("default", raw_job(1))
    parts.ledger.admit(done)
    await parts.settler.settle(done, Ack())
    await parts.fence.relist()
    parts.ledger.finish(done)

    assert await listed(store) == []
    assert [await parts.reconciler.reconcile() for _ in range(3)] == [0, 0, 0]
    assert await store.client.llen(store.keys.queue("default")) == 0


async def test_a_failure_filed_before_the_relist_is_not_listed_again(
    store: Store, parts: Parts
) -> None:
    failed = Work("default", raw_job(1))
    parts.ledger.admit(failed)
    await put_in_progress(store, failed.raw)
    await parts.settler.settle(failed, filing(1))
    await parts.fence.relist()  # e.g. asked for by a reconcile pass
    parts.ledger.finish(failed)

    assert await listed(store) == []
    assert [await parts.reconciler.reconcile() for _ in range(3)] == [0, 0, 0]
    assert await store.client.zcard(store.keys.retry("default")) == 1


# -- the whole worker, Redis restarted under it -----------------------------------------


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    process = ServerProcess().start()  # no AOF: a restart forgets everything
    yield process
    process.cleanup()


async def test_a_job_that_fails_right_after_redis_lost_every_key_is_retried(
    server: ServerProcess,
) -> None:
    """It fails before the next beat could say FORGOTTEN (a beat every 3s): its
    file_failure finds no list; the failure must still reach retry."""
    settings: dict[str, Any] = {**FAST, "retry_base_delay": 3600.0,
                                "heartbeat_interval": 3.0, "orphan_threshold": 12.0}
    jobs = App(server.url, namespace="loss", **settings)
    gate = anyio.Event()
    started: list[int] = []

    @jobs.job(name="fails", retry=3)
    async def fails() -> None:
        started.append(1)
        await gate.wait()
        raise RuntimeError("after the restart")

    client = redis.asyncio.Redis(port=server.port)
    try:
        async with jobs.worker() as manager:
            await fails.enqueue()
            await wait_until(lambda: bool(started), timeout=10)
            server.stop()
            server.start()  # same port, empty
            gate.set()

            async def retried() -> bool:
                return bool(await client.zcard(manager.store.keys.retry("default")) == 1)

            await wait_until(retried, timeout=20)
            listed_key = manager.store.keys.in_progress("default", manager.identity)
            assert await client.llen(listed_key) == 0
            assert manager.ledger.pending == {}
    finally:
        await client.aclose()
        await jobs.close()
    assert started == [1]
