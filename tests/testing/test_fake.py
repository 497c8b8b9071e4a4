"""``jobs.testing.fake()``: enqueues are recorded, not pushed, and checked as real ones —
with no Redis (the App's URL cannot be reached: any Redis call would raise)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import anyio
import pytest
import redis.exceptions

from cogworker_async import App, ConfigurationError, PayloadTooLarge, SerializationError
from cogworker_async.middleware import Enqueue, EnqueueNext


def _app(offline_app: Callable[..., App], **settings: object) -> App:
    return offline_app(queues=["critical", "default"], max_payload_bytes=2048, **settings)


async def test_every_enqueue_path_is_recorded_with_its_arguments_queue_and_due_time(
        offline_app: Callable[..., App]) -> None:
    jobs = _app(offline_app)

    @jobs.job(name="send_email")
    async def send_email(to: str, subject: str = "") -> None: ...

    with jobs.testing.fake() as testing:
        now = await send_email.enqueue("a@x.org", subject="hi")
        soon = await send_email.enqueue_in(30, "b@x.org")
        later = await send_email.enqueue_at(datetime.now(UTC) + timedelta(hours=1), "c@x.org")
        urgent = await send_email.options(queue="critical", retry=False).enqueue("d@x.org")
        by_name = await jobs.enqueue("send_email", "e@x.org")
        many = await send_email.enqueue_many([(("f@x.org",), {}), (("g@x.org",), {"subject": "s"})])
        synced = await anyio.to_thread.run_sync(send_email.enqueue_sync, "h@x.org")
        recorded = testing.enqueued()

    assert [(r.jid, r.args, r.kwargs, r.queue, r.state) for r in recorded] == [
        (now, ["a@x.org"], {"subject": "hi"}, "default", "queued"),
        (soon, ["b@x.org"], {}, "default", "scheduled"),
        (later, ["c@x.org"], {}, "default", "scheduled"),
        (urgent, ["d@x.org"], {}, "critical", "queued"),
        (by_name, ["e@x.org"], {}, "default", "queued"),
        (many[0], ["f@x.org"], {}, "default", "queued"),
        (many[1], ["g@x.org"], {"subject": "s"}, "default", "queued"),
        (synced, ["h@x.org"], {}, "default", "queued"),
    ]
    assert recorded[0].due_at is None
    assert recorded[1].due_at == pytest.approx(time.time() + 30, abs=5)
    assert recorded[2].due_at == pytest.approx(time.time() + 3600, abs=5)
    assert recorded[3].payload["retry"] is False
    assert [r.jid for r in testing.enqueued(queue="critical")] == [urgent]
    assert len(testing.enqueued(job=send_email)) == len(testing.enqueued(job="send_email")) == 8


async def test_refusals_are_the_real_client_s_and_record_nothing(
        offline_app: Callable[..., App]) -> None:
    jobs = _app(offline_app)

    @jobs.job(name="work")
    async def work(tag: str) -> None: ...

    with jobs.testing.fake() as testing:
        with pytest.raises(TypeError, match="missing a required argument"):
            await work.enqueue()  # type: ignore[call-arg]
        with pytest.raises(SerializationError, match="JSON"):
            await work.enqueue({1, 2})  # type: ignore[arg-type]
        with pytest.raises(SerializationError, match="tuple"):
            await work.enqueue(("a", "b"))  # type: ignore[arg-type]
        with pytest.raises(PayloadTooLarge, match="max_payload_bytes"):
            await work.enqueue("x" * 4096)
        with pytest.raises(ValueError, match="queue"):
            await work.options(queue="no spaces").enqueue("a")
        with pytest.raises(ValueError, match="aware datetime"):
            await work.enqueue_at(datetime.now() + timedelta(hours=1), "a")
        with pytest.raises(ValueError, match="expire before it could run"):
            await work.options(expires_at=time.time() + 10).enqueue_in(60, "a")
        assert testing.enqueued() == []


async def test_client_middleware_runs_and_may_refuse(offline_app: Callable[..., App]) -> None:
    jobs = _app(offline_app)

    async def tenant(enqueue: Enqueue, call_next: EnqueueNext) -> str | None:
        if enqueue.payload["args"] == ["refused"]:
            return None
        enqueue.payload["tenant"] = "acme"
        return await call_next(enqueue)

    jobs.add_client_middleware(tenant)

    @jobs.job(name="work")
    async def work(tag: str) -> None: ...

    with jobs.testing.fake() as testing:
        assert await work.enqueue("refused") is None
        jid = await work.enqueue("kept")
        (recorded,) = testing.enqueued()
    assert (recorded.jid, recorded.payload["tenant"]) == (jid, "acme")


async def test_a_unique_duplicate_is_refused_until_the_job_ran(
        offline_app: Callable[..., App]) -> None:
    jobs = _app(offline_app)

    @jobs.job(name="report", unique=True)
    async def report(day: str) -> None: ...

    with jobs.testing.fake() as testing:
        first = await report.enqueue("monday")
        assert first is not None
        assert await report.enqueue("monday") is None
        # The digest covers the queue: the same job on another queue is no duplicate.
        assert await report.options(queue="critical").enqueue("monday") is not None
        assert await report.enqueue_many([(("monday",), {}), (("tuesday",), {})]) == \
            [None, testing.enqueued()[-1].jid]
        await testing.drain()
        assert await report.enqueue("monday") is not None


async def test_a_chosen_jid_is_refused_while_alive_and_free_once_it_ended(
        offline_app: Callable[..., App]) -> None:
    jobs = _app(offline_app)

    @jobs.job(name="receipt")
    async def receipt(order: int) -> None: ...

    with jobs.testing.fake() as testing:
        assert await receipt.options(jid="receipt-1").enqueue(1) == "receipt-1"
        assert await receipt.options(jid="receipt-1").enqueue(1) is None
        assert await receipt.options(jid="receipt-1").enqueue_in(60, 1) is None
        # Alive in any queue refuses it (issue 25: two live copies of one jid), as the
        # client does against Redis.
        assert await receipt.options(jid="receipt-1", queue="critical").enqueue(1) is None
        await testing.drain()
        assert testing.status("receipt-1", queue="default").state == "succeeded"
        assert await receipt.options(jid="receipt-1").enqueue(1) == "receipt-1"
        assert testing.status("receipt-1", queue="default").state == "queued"


async def test_without_status_records_a_chosen_jid_is_refused_as_in_a_real_app(
        offline_app: Callable[..., App]) -> None:
    jobs = _app(offline_app, track_jobs=False)

    @jobs.job(name="receipt")
    async def receipt(order: int) -> None: ...

    with jobs.testing.fake(), pytest.raises(ConfigurationError, match="track_jobs"):
        await receipt.options(jid="receipt-1").enqueue(1)


async def test_a_block_starts_empty_keeps_its_records_and_then_enqueues_go_to_redis(
        offline_app: Callable[..., App]) -> None:
    jobs = _app(offline_app)

    @jobs.job(name="work")
    async def work(tag: str) -> None: ...

    async with jobs.testing.fake() as testing:
        assert testing.active
        await work.enqueue("a")
        with pytest.raises(RuntimeError, match="already faked"), jobs.testing.fake():
            pass
    assert not testing.active
    assert [r.args for r in testing.enqueued()] == [["a"]]  # readable after the block
    with jobs.testing.fake():
        assert testing.enqueued() == []
        await work.enqueue("b")
    testing.clear()
    assert testing.enqueued() == []
    with pytest.raises(redis.exceptions.ConnectionError):
        await work.enqueue("c")  # not faked any more: the real push (no server here)
