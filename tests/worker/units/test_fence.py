"""Fence on its own: a process declared dead stops the jobs recovered elsewhere and
forgets their outcomes, then clears its mark in every queue's slot; a process whose keys
Redis lost lists its jobs again, each on the list of the queue it came from."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest
from anyio.abc import TaskStatus

from cogworker_async.redis.beats import ALIVE, ZOMBIE, BeatWriter
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
QUEUES = ["default"]
TWO_QUEUES = ["default", "mail"]
BEAT_TTL = 30.0


def fence_of(store: Store, ledger: Ledger, queues: Sequence[str] = QUEUES) -> Fence:
    return Fence(store, IDENTITY, ledger, queues=queues, retry_pause=RETRY_PAUSE)


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
        await fence_of(store, ledger).fence()
        await wait_until(lambda: runs.cancelled == [recovered.raw], timeout=5)
        assert ledger.pending == {}
        assert set(ledger.running) == {ours.raw}
        tg.cancel_scope.cancel()


async def test_a_zombie_beat_from_the_heartbeat_thread_fences(store: Store,
                                                                ledger: Ledger) -> None:
    recovered = Work("default", raw_job(1))
    runs = Runs(ledger)
    fence = fence_of(store, ledger)
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

        async def in_progress(self, identity: str, queue: str) -> list[bytes]:
            if self.failures:
                self.failures -= 1
                return await unreachable.in_progress(identity, queue)
            return await super().in_progress(identity, queue)

    recovered = Work("default", raw_job(1))
    runs = Runs(ledger)
    async with store_of(Flapping, redis_url, namespace) as flapping, \
            anyio.create_task_group() as tg:
        fence = fence_of(flapping, ledger)
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
    ledger.remember(unsettled, FILED, queue="default")
    ledger.remember(acked, Ack(), queue="default")  # needs no list entry: never listed again
    fence = fence_of(store, ledger)
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
    ledger.remember(settles, Ack(), queue="default")

    class SettledMeanwhile(Store):
        async def relist(self, identity: str, queue: str,
                         raws: Sequence[bytes]) -> int | None:
            listed_now = await super().relist(identity, queue, raws)
            ledger.settled(settles)  # its ack found nothing to remove
            return listed_now

    async with store_of(SettledMeanwhile, redis_url, namespace) as racing:
        await fence_of(racing, ledger).relist()
    assert await listed(store) == [running.raw]


async def test_fencing_clears_the_mark_last_and_a_second_fencing_spares_later_jobs(
    store: Store, ledger: Ledger
) -> None:
    """A lost ZOMBIE reply is not a lost fencing: the mark stays (every beat says ZOMBIE)
    until fence() has run; run twice (its SREM failed), it cancels nothing fetched since."""
    recovered, fetched_since = Work("default", raw_job(1)), Work("default", raw_job(2))
    await store.client.sadd(store.keys.queue_declared_dead("default"), IDENTITY)
    runs = Runs(ledger)
    fence = fence_of(store, ledger)
    async with anyio.create_task_group() as tg:
        await tg.start(runs.run, recovered)
        await fence.fence()
        await wait_until(lambda: runs.cancelled == [recovered.raw], timeout=5)
        assert not await store.client.sismember(store.keys.queue_declared_dead("default"),
                                                IDENTITY)
        await put_in_progress(store, fetched_since.raw)
        await tg.start(runs.run, fetched_since)
        await fence.fence()
        await anyio.wait_all_tasks_blocked()
        assert runs.cancelled == [recovered.raw]
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("queue", ["default", "mail"])
async def test_no_relist_while_marked_declared_dead(store: Store, ledger: Ledger,
                                                    queue: str) -> None:
    """Its jobs run elsewhere: listed again here, fencing would not cancel them. The mark
    of one queue's slot is enough, whichever of the process's queues it is."""
    ledger.admit(Work(queue, raw_job(1, queue=queue)))
    await store.client.sadd(store.keys.queue_declared_dead(queue), IDENTITY)
    with pytest.raises(RelistRefused):
        await fence_of(store, ledger, TWO_QUEUES).relist()
    assert await listed(store, queue) == []
    assert ledger.relist_wanted


# -- a process serving two queues: a list, a beat and a mark in each queue's slot ------


async def test_jobs_are_listed_again_each_on_the_list_of_its_queue(
    store: Store, ledger: Ledger
) -> None:
    mailing, plain = Work("mail", raw_job(1, queue="mail")), Work("default", raw_job(2))
    unsettled = raw_job(3, queue="mail")
    ledger.admit(mailing)
    ledger.admit(plain)
    ledger.remember(unsettled, FILED, queue="mail")
    await fence_of(store, ledger, TWO_QUEUES).relist()
    assert set(await listed(store, "mail")) == {mailing.raw, unsettled}
    assert await listed(store) == [plain.raw]


async def test_a_fenced_zombie_clears_its_marks_in_every_queue_slot(
    store: Store, ledger: Ledger, redis_url: str
) -> None:
    """Recovery took its jobs from both queues and marked it in both slots: every beat
    says ZOMBIE until it has fenced; then no slot says it again. A mark left in one slot
    would fence it again on every beat, cancelling the jobs it fetched since."""
    writer = BeatWriter(redis_url, store.keys, IDENTITY, TWO_QUEUES)
    kept = Work("mail", raw_job(1, queue="mail"))  # still listed: not recovered
    recovered = [Work("default", raw_job(2)), Work("mail", raw_job(3, queue="mail"))]
    runs = Runs(ledger)
    try:
        assert await anyio.to_thread.run_sync(beat, writer, True) == ALIVE
        for queue in TWO_QUEUES:
            await store.client.sadd(store.keys.queue_declared_dead(queue), IDENTITY)
        await put_in_progress(store, kept.raw, queue="mail")
        assert await anyio.to_thread.run_sync(beat, writer, False) == ZOMBIE
        async with anyio.create_task_group() as tg:
            for work in (kept, *recovered):
                await tg.start(runs.run, work)
            await fence_of(store, ledger, TWO_QUEUES).fence()
            await wait_until(lambda: len(runs.cancelled) == 2, timeout=5)
            assert set(runs.cancelled) == {work.raw for work in recovered}
            assert set(ledger.running) == {kept.raw}
            for queue in TWO_QUEUES:
                assert not await store.client.sismember(store.keys.queue_declared_dead(queue),
                                                        IDENTITY)
            assert await anyio.to_thread.run_sync(beat, writer, False) == ALIVE
            tg.cancel_scope.cancel()
    finally:
        writer.close()


def beat(writer: BeatWriter, first: bool) -> int:
    return writer.beat({"pid": 1}, BEAT_TTL, first=first)


async def test_fencing_leaves_the_jobs_of_a_queue_whose_keys_were_lost(
    store: Store, ledger: Ledger
) -> None:
    """A beat says ZOMBIE in mail's slot and FORGOTTEN in default's (two incidents on a
    cluster): mail's recovered job is cancelled; default's job, missing only because its
    list was lost, keeps running and is listed again."""
    lost, recovered = Work("default", raw_job(1)), Work("mail", raw_job(2))
    runs = Runs(ledger)
    fence = fence_of(store, ledger, TWO_QUEUES)
    async with anyio.create_task_group() as tg:
        await tg.start(runs.run, lost)
        await tg.start(runs.run, recovered)
        fence._keys_lost(frozenset({"default"}))  # what the beat's news does first
        await fence.fence()
        await wait_until(lambda: runs.cancelled == [recovered.raw], timeout=5)
        assert set(ledger.running) == {lost.raw}
        await fence.relist()
        assert await listed(store) == [lost.raw]
        assert fence.lost_queues == set()
        tg.cancel_scope.cancel()
