"""Fence on its own: a process declared dead stops the jobs recovered elsewhere and
forgets their outcomes; a process whose keys Redis lost lists its jobs again."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest
from anyio.abc import TaskStatus

from cogworker_async.redis.store import Store
from cogworker_async.worker.fencing import Fence, RelistRefused
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.outcome import Ack, Filing
from tests.waiting import wait_until
from tests.worker.units.conftest import (
    IDENTITY,
    listed,
    put_in_progress,
    raw_job,
    store_of,
)

RETRY_PAUSE = 0.05
FILED = Filing("dead", {"jid": "j2"}, 0.0, terminal=True)


class Runs:
    """Jobs running in the ledger until cancelled; remembers which were."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.cancelled: list[bytes] = []

    async def run(self, work: Work, *, task_status: TaskStatus[None]) -> None:
        self.ledger.admit(work)
        with anyio.CancelScope() as scope:
            self.ledger.start(work, scope)
            task_status.started()
            await anyio.sleep_forever()
        self.ledger.stop(work)
        self.ledger.finish(work)
        self.cancelled.append(work.raw)


async def test_jobs_recovered_elsewhere_are_cancelled_and_forgotten(
    store: Store, ledger: Ledger
) -> None:
    ours, recovered = Work("default", raw_job(1)), Work("default", raw_job(2))
    finished_here = raw_job(3)  # ran here, ack pending, recovered meanwhile
    await put_in_progress(store, ours.raw)
    ledger.remember(finished_here, Ack())
    runs = Runs(ledger)
    async with anyio.create_task_group() as tg:
        await tg.start(runs.run, ours)
        await tg.start(runs.run, recovered)
        await Fence(store, IDENTITY, ledger, retry_pause=RETRY_PAUSE).fence()
        await wait_until(lambda: runs.cancelled == [recovered.raw], timeout=5)
        assert ledger.pending == {}
        assert set(ledger.running) == {ours.raw}
        tg.cancel_scope.cancel()


async def test_a_zombie_beat_from_the_heartbeat_thread_fences(store: Store,
                                                                ledger: Ledger) -> None:
    recovered = Work("default", raw_job(1))
    runs = Runs(ledger)
    fence = Fence(store, IDENTITY, ledger, retry_pause=RETRY_PAUSE)
    async with anyio.create_task_group() as tg:
        tg.start_soon(fence.run)
        await tg.start(runs.run, recovered)
        await anyio.to_thread.run_sync(fence.declared_dead_from_thread)
        await wait_until(lambda: runs.cancelled == [recovered.raw], timeout=5)
        tg.cancel_scope.cancel()


async def test_fencing_retries_while_redis_is_away(
    unreachable: Store, redis_url: str, namespace: str, ledger: Ledger
) -> None:
    """The fence runs as soon as Redis answers again; it never stops the worker."""

    class Flapping(Store):
        failures = 2

        async def in_progress(self, identity: str) -> list[bytes]:
            if self.failures:
                self.failures -= 1
                return await unreachable.in_progress(identity)
            return await super().in_progress(identity)

    recovered = Work("default", raw_job(1))
    runs = Runs(ledger)
    async with store_of(Flapping, redis_url, namespace) as flapping, \
            anyio.create_task_group() as tg:
        fence = Fence(flapping, IDENTITY, ledger, retry_pause=RETRY_PAUSE)
        tg.start_soon(fence.run)
        await tg.start(runs.run, recovered)
        await anyio.to_thread.run_sync(fence.declared_dead_from_thread)
        await wait_until(lambda: runs.cancelled == [recovered.raw], timeout=5)
        assert flapping.failures == 0
        tg.cancel_scope.cancel()


async def test_jobs_are_listed_again_after_redis_lost_the_list(store: Store,
                                                               ledger: Ledger) -> None:
    running, unsettled, acked = Work("default", raw_job(1)), raw_job(2), raw_job(3)
    ledger.admit(running)
    ledger.remember(unsettled, FILED)
    ledger.remember(acked, Ack())  # an ack needs no list entry: never listed again
    fence = Fence(store, IDENTITY, ledger, retry_pause=RETRY_PAUSE)
    async with anyio.create_task_group() as tg:
        tg.start_soon(fence.run)
        await anyio.to_thread.run_sync(fence.forgotten_from_thread)

        async def relisted() -> bool:
            return set(await listed(store)) == {running.raw, unsettled}

        await wait_until(relisted, timeout=5)
        tg.cancel_scope.cancel()
    assert set(ledger.running) == {running.raw}  # nothing cancelled: they are still ours


async def test_a_job_settled_during_the_relist_is_not_left_listed(
    store: Store, redis_url: str, namespace: str, ledger: Ledger
) -> None:
    """Left listed, reconcile would take it for a stray and run it again."""
    running, settles = Work("default", raw_job(1)), raw_job(2)
    ledger.admit(running)
    ledger.remember(settles, Ack())

    class SettledMeanwhile(Store):
        async def relist(self, identity: str, raws: Sequence[bytes]) -> int | None:
            listed_now = await super().relist(identity, raws)
            ledger.settled(settles)  # its ack found nothing to remove
            return listed_now

    async with store_of(SettledMeanwhile, redis_url, namespace) as racing:
        await Fence(racing, IDENTITY, ledger, retry_pause=RETRY_PAUSE).relist()
    assert await listed(store) == [running.raw]


async def test_fencing_clears_the_mark_last_and_a_second_fencing_spares_later_jobs(
    store: Store, ledger: Ledger
) -> None:
    """A lost ZOMBIE reply is not a lost fencing: the mark stays (every beat says ZOMBIE)
    until fence() has run; run twice (its SREM failed), it cancels nothing fetched since."""
    recovered, fetched_since = Work("default", raw_job(1)), Work("default", raw_job(2))
    await store.client.sadd(store.keys.declared_dead, IDENTITY)
    runs = Runs(ledger)
    fence = Fence(store, IDENTITY, ledger, retry_pause=RETRY_PAUSE)
    async with anyio.create_task_group() as tg:
        await tg.start(runs.run, recovered)
        await fence.fence()
        await wait_until(lambda: runs.cancelled == [recovered.raw], timeout=5)
        assert not await store.client.sismember(store.keys.declared_dead, IDENTITY)
        await put_in_progress(store, fetched_since.raw)
        await tg.start(runs.run, fetched_since)
        await fence.fence()
        await anyio.wait_all_tasks_blocked()
        assert runs.cancelled == [recovered.raw]
        tg.cancel_scope.cancel()


async def test_no_relist_while_marked_declared_dead(store: Store, ledger: Ledger) -> None:
    """Its jobs run elsewhere: listed again here, fencing would not cancel them."""
    ledger.admit(Work("default", raw_job(1)))
    await store.client.sadd(store.keys.declared_dead, IDENTITY)
    with pytest.raises(RelistRefused):
        await Fence(store, IDENTITY, ledger, retry_pause=RETRY_PAUSE).relist()
    assert await listed(store) == []
    assert ledger.relist_wanted
