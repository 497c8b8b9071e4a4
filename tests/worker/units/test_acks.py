"""AckBatcher on its own: acks that arrive together share one script call per queue (each
queue's list is in its own slot), every job in it leaves its list, and no ack is left
waiting when a call fails or is interrupted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import anyio
import pytest

from cogworker_async.redis.errors import RedisError
from cogworker_async.redis.store import Store
from cogworker_async.worker.acks import AckBatcher
from tests.worker.units.conftest import (
    IDENTITY,
    listed,
    put_in_progress,
    raw_job,
    store_of,
)

JOBS = 50


class CountingStore(Store):
    """The real Store, counting its ack calls; ``gate`` holds each call until set."""

    calls: int = 0
    gate: anyio.Event | None = None

    async def ack(self, identity: str, queue: str,
                  jobs: Sequence[tuple[bytes, str | None]]) -> int:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        return await super().ack(identity, queue, jobs)


@pytest.fixture
async def counting(redis_url: str, namespace: str) -> AsyncIterator[CountingStore]:
    async with store_of(CountingStore, redis_url, namespace) as counting:
        yield counting


async def test_jobs_finishing_together_are_acked_in_few_calls(counting: CountingStore) -> None:
    raws = [raw_job(n) for n in range(JOBS)]
    await put_in_progress(counting, *raws, raw_job(999))
    batcher = AckBatcher(counting, IDENTITY)
    async with anyio.create_task_group() as tg:
        for n, raw in enumerate(raws):
            tg.start_soon(batcher.ack, "default", raw, f"j{n}")
    assert await listed(counting) == [raw_job(999)]
    assert counting.calls <= 2  # the first alone, the rest together


async def test_acks_of_two_queues_each_leave_their_own_list(counting: CountingStore) -> None:
    """One flush, one call per queue: each job leaves the list of the queue it came from
    (in that queue's slot), and nothing else is taken off."""
    mail = [raw_job(n, queue="mail") for n in range(JOBS)]
    plain = [raw_job(n) for n in range(JOBS)]
    await put_in_progress(counting, *mail, queue="mail")
    await put_in_progress(counting, *plain, raw_job(999))
    batcher = AckBatcher(counting, IDENTITY)
    async with anyio.create_task_group() as tg:
        for n in range(JOBS):
            tg.start_soon(batcher.ack, "mail", mail[n], f"j{n}")
            tg.start_soon(batcher.ack, "default", plain[n], f"j{n}")
    assert await listed(counting, "mail") == []
    assert await listed(counting) == [raw_job(999)]
    assert counting.calls <= 3  # the first alone, then one per queue


async def test_a_failed_call_fails_every_ack_in_it(unreachable: Store) -> None:
    batcher = AckBatcher(unreachable, IDENTITY)
    failures: list[BaseException] = []

    async def ack(n: int) -> None:
        try:
            await batcher.ack("default", raw_job(n), f"j{n}")
        except RedisError as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(ack, n)
    assert len(failures) == 3


async def test_an_interrupted_flush_leaves_no_ack_waiting(counting: CountingStore) -> None:
    """The job whose call was in flight is cancelled; those queued behind it get a lost
    reply, which the settler retries (acks are idempotent)."""
    counting.gate = anyio.Event()
    batcher = AckBatcher(counting, IDENTITY)
    outcome: list[str] = []
    first = anyio.CancelScope()

    async def flushing() -> None:
        with first:
            await batcher.ack("default", raw_job(1), "j1")  # its call waits on the gate
        outcome.append("cancelled" if first.cancelled_caught else "acked")

    async def behind() -> None:
        try:
            await batcher.ack("default", raw_job(2), "j2")
        except RedisError:
            outcome.append("lost reply")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(flushing)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(behind)
            await anyio.wait_all_tasks_blocked()
            first.cancel()
    assert outcome == ["cancelled", "lost reply"]
