"""Status records (``lua/_record.lua``): every script that moves a job writes the job's
new state in its record, in the same step as the move.

Each move is tested through the Store method that runs it: the fields it writes and the
TTL it sets, a repeated call (a lost reply sent again), and the cancel that waits for the
next move. Since each move is one script, a crash can only fall between two scripts:
``test_after_every_step_the_record_says_where_the_job_is`` walks whole lives of a job and
checks, after each step, that the record agrees with where the job's copy is.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio

from cogworker_async.errors import WrongTypeKey
from cogworker_async.jobs import wire as job_module
from cogworker_async.jobs.status import CANCELLED, CANCELS_TTL, LIVE_TTL, Ended, unpack
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import Requeued, as_bytes
from cogworker_async.redis.store import Failure, SetName, Store
from cogworker_async.settings import KEEP_STATUS
from tests.redis.lua.helpers import (
    NOT_UTF8,
    fetched,
    items,
    jid_of,
    make_job,
    record_ttl,
    redis_now,
    run_raw,
    scored,
    stored_record,
)

IDENTITY = "host:1:abc"
OWNER = "dead-host:7:f00"
"""A process that fetched jobs and died (it never beat: recovery finds it dead)."""
QUEUE = "default"
SLACK = 5
"""Seconds a TTL or a timestamp may be off by: the test's own run time."""


async def record(store: Store, jid: str, queue: str = QUEUE) -> dict[str, str]:
    return await stored_record(store.client, store.keys, queue, jid)


async def ttl(store: Store, jid: str, queue: str = QUEUE) -> int:
    return await record_ttl(store.client, store.keys, queue, jid)


async def running(store: Store, identity: str = IDENTITY, **extra: Any) -> bytes:
    [raw] = await fetched(store, identity, [make_job(**extra)])
    return raw


async def failed(store: Store, raw: bytes, target: SetName = "retry", delay: float = 60.0,
                 keep: float | None = None) -> bool:
    """``raw``, running on IDENTITY, failed: filed in ``target`` as itself."""
    return await store.file_failure(IDENTITY, QUEUE, raw, target, raw, delay,
                                    failure=Failure(jid_of(raw), "ValueError: boom", 2,
                                                    keep=keep))


async def promote_due(store: Store, target: SetName) -> int:
    """What the poller does: the due members of QUEUE's ``target`` onto the queue."""
    due = await store.due(QUEUE, target, 10)
    return await store.promote(QUEUE, target, [(m, m) for m in due])


async def recover_owner(store: Store, max_orphanings: int = 3) -> Requeued | None:
    return await store.recover(OWNER, QUEUE, dead_for=60.0, max_orphanings=max_orphanings)


@asynccontextmanager
async def listening(client: redis.asyncio.Redis, channel: str
                    ) -> AsyncIterator[Callable[[], Awaitable[bytes]]]:
    """Subscribed to ``channel``; yields a function that returns its next message."""
    pubsub = client.pubsub()
    await pubsub.subscribe(channel)
    try:
        assert (await pubsub.get_message(timeout=5.0))["type"] == "subscribe"

        async def next_message() -> bytes:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
            assert message is not None, "nothing published"
            return as_bytes(message["data"])

        yield next_message
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def nothing_published(client: redis.asyncio.Redis, channel: str,
                            next_message: Callable[[], Awaitable[bytes]]) -> bool:
    """Whether nothing was published on ``channel`` before now: a marker published now
    is the next message (Redis delivers a channel's messages in order)."""
    await client.publish(channel, "marker")
    return await next_message() == b"marker"


# -- enqueue, schedule: the record is born ---------------------------------------------


async def test_enqueue_writes_a_queued_record(store: Store) -> None:
    jobs = [make_job(), make_job()]

    await store.enqueue(QUEUE, jobs)

    for raw in jobs:
        fields = await record(store, jid_of(raw))
        assert fields["state"] == "queued"
        assert fields["name"] == "send_email"  # its queue is the key's slot
        assert float(fields["enqueued_at"]) == pytest.approx(time.time(), abs=SLACK)
        assert await ttl(store, jid_of(raw)) == pytest.approx(LIVE_TTL, abs=SLACK)
    status = await store.job_status(jid_of(jobs[0]))
    assert status is not None
    assert (status.state, status.queue) == ("queued", QUEUE)


@pytest.mark.parametrize("push", ["unique", "batch", "cron"])
async def test_the_other_pushes_write_a_queued_record(store: Store, push: str) -> None:
    raw = make_job()
    if push == "unique":
        assert await store.enqueue_unique("d1", jid_of(raw), 60.0, QUEUE, raw)
    elif push == "batch":
        assert await store.push_batch(QUEUE, [raw]) == []
    else:
        assert await store.cron_claim("nightly", 1_700_000_000.0, QUEUE, raw)

    assert (await record(store, jid_of(raw)))["state"] == "queued"
    assert await ttl(store, jid_of(raw)) == pytest.approx(LIVE_TTL, abs=SLACK)


@pytest.mark.parametrize("how", ["delay", "at", "unique"])
async def test_a_scheduled_records_ttl_counts_from_the_due_time(store: Store, how: str) -> None:
    raw = make_job()
    if how == "delay":
        await store.schedule(QUEUE, [raw], delay=3_600.0)
    elif how == "at":
        await store.schedule(QUEUE, [raw], at=await redis_now(store) + 3_600.0)
    else:
        await store.enqueue_unique("d1", jid_of(raw), 60.0, QUEUE, raw, delay=3_600.0)

    assert (await record(store, jid_of(raw)))["state"] == "scheduled"
    assert await ttl(store, jid_of(raw)) == pytest.approx(LIVE_TTL + 3_600, abs=SLACK)


async def test_a_job_due_in_the_past_gets_no_less_than_the_live_ttl(store: Store) -> None:
    raw = make_job()

    await store.schedule(QUEUE, [raw], at=1.0)

    assert await ttl(store, jid_of(raw)) == pytest.approx(LIVE_TTL, abs=SLACK)


# -- a chosen jid: refused while it may still run ----------------------------------------


async def alive_as(store: Store, state: str, jid: str) -> None:
    """Leave job ``jid`` in ``state``; "cancel pending": cancelled, its copy still queued."""
    raw = make_job(jid=jid)
    if state == "scheduled":
        await store.schedule(QUEUE, [raw], at=2_000_000_000.0)
        return
    if state in ("queued", "cancel pending"):
        await store.enqueue(QUEUE, [raw])
        if state == "cancel pending":
            assert await store.cancel_job(QUEUE, jid) == "cancelled"
        return
    await fetched(store, IDENTITY, [raw])
    if state == "retrying":
        assert await failed(store, raw)


@pytest.mark.parametrize("state", ["queued", "scheduled", "running", "retrying",
                                   "cancel pending"])
async def test_a_chosen_jid_is_refused_while_the_job_may_still_run(
    store: Store, keys: Keys, state: str
) -> None:
    await alive_as(store, state, "order-42")
    before = (await record(store, "order-42"), await items(store, keys.queue(QUEUE)),
              await store.client.zcard(keys.schedule(QUEUE)))
    again = make_job(jid="order-42")

    assert await store.enqueue(QUEUE, [again], chosen=True) == -1
    assert await store.schedule(QUEUE, [again], at=1.0, chosen=True) == -1
    assert await store.enqueue_unique("d1", "order-42", 60.0, QUEUE, again,
                                      chosen=True) is False

    assert (await record(store, "order-42"), await items(store, keys.queue(QUEUE)),
            await store.client.zcard(keys.schedule(QUEUE))) == before
    assert await store.client.exists(keys.unique(QUEUE, "d1")) == 0


async def finished_as(store: Store, state: str, jid: str) -> None:
    """Leave job ``jid`` ended in ``state``, with the fields each end writes."""
    if state == "cancelled":
        await store.enqueue(QUEUE, [make_job(jid=jid)])
        assert await store.cancel_job(QUEUE, jid) == "cancelled"
        assert (await store.fetch(IDENTITY, [QUEUE], 1)).cancelled == [(QUEUE, jid)]
        return
    raw = await running(store, jid=jid)
    await store.set_progress(IDENTITY, [(QUEUE, jid, 0.5, b'"half"')])
    if state == "succeeded":
        assert await store.ack(IDENTITY, QUEUE, [(raw, jid, Ended(result=b"42", keep=60))])
    else:
        assert await failed(store, raw, "dead")


@pytest.mark.parametrize("state", ["succeeded", "dead", "cancelled"])
async def test_a_chosen_jid_is_accepted_once_the_job_ended_and_its_record_starts_over(
    store: Store, keys: Keys, state: str
) -> None:
    await finished_as(store, state, "order-42")
    assert (await record(store, "order-42"))["state"] == state

    assert await store.enqueue(QUEUE, [make_job(jid="order-42")], chosen=True) == 1

    fields = await record(store, "order-42")
    assert sorted(fields) == ["enqueued_at", "name", "state"]  # no result, error..
    assert fields["state"] == "queued"
    assert await ttl(store, "order-42") == pytest.approx(LIVE_TTL, abs=SLACK)


# -- fetch, ack ------------------------------------------------------------------------


async def test_fetch_marks_the_record_running_by_this_process(store: Store) -> None:
    raw = make_job()
    await store.enqueue(QUEUE, [raw])
    enqueued_at = (await record(store, jid_of(raw)))["enqueued_at"]

    await store.fetch(IDENTITY, [QUEUE], 1)

    fields = await record(store, jid_of(raw))
    assert (fields["state"], fields["by"]) == ("running", IDENTITY)
    assert float(fields["started_at"]) == pytest.approx(await redis_now(store), abs=SLACK)
    assert fields["enqueued_at"] == enqueued_at
    assert await ttl(store, jid_of(raw)) == pytest.approx(LIVE_TTL, abs=SLACK)


async def test_ack_marks_it_succeeded_for_the_stores_keep_status(
    redis_url: str, namespace: str
) -> None:
    store = Store.from_url(redis_url, namespace, keep_status=42.0)
    try:
        raw = await running(store)

        assert await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))]) == 1

        fields = await record(store, jid_of(raw))
        assert fields["state"] == "succeeded"
        assert "result" not in fields
        assert float(fields["finished_at"]) == pytest.approx(await redis_now(store), abs=SLACK)
        assert await ttl(store, jid_of(raw)) == pytest.approx(42, abs=SLACK)
    finally:
        await store.aclose()


async def test_ack_keeps_the_result_for_its_keep_and_tells_the_waiters(store: Store) -> None:
    raw = await running(store)
    channel = store.keys.finished_channel(jid_of(raw))

    async with listening(store.client, channel) as next_message:
        await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw), Ended(result=b'{"n": 1}',
                                                                   keep=120.0))])

        assert await next_message() == b"succeeded"
    status = await store.job_status(jid_of(raw), [QUEUE])
    assert status is not None
    assert (status.state, status.has_result, status.result) == ("succeeded", True, {"n": 1})
    assert await ttl(store, jid_of(raw)) == pytest.approx(120, abs=SLACK)


async def test_a_job_that_keeps_no_result_publishes_nothing(store: Store) -> None:
    raw = await running(store)
    channel = store.keys.finished_channel(jid_of(raw))

    async with listening(store.client, channel) as next_message:
        await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))])

        assert await nothing_published(store.client, channel, next_message)


async def test_a_late_ack_that_finds_nothing_writes_no_result(store: Store) -> None:
    # OWNER was declared dead and its job runs again elsewhere: OWNER's ack (fenced, late)
    # must not say the job succeeded, nor store the result of a run that "did not happen".
    raw = await running(store, OWNER)
    assert await recover_owner(store) == Requeued(moved=1)
    await store.fetch(IDENTITY, [QUEUE], 1)
    before = await record(store, jid_of(raw))

    late = Ended(result=b"1", keep=60.0)
    assert await store.ack(OWNER, QUEUE, [(raw, jid_of(raw), late)]) == 0

    assert await record(store, jid_of(raw)) == before
    assert (before["state"], before["by"]) == ("running", IDENTITY)


async def test_a_second_ack_after_a_lost_reply_changes_nothing(store: Store) -> None:
    raw = await running(store)
    ended = Ended(result=b"1", keep=60.0)
    await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw), ended)])
    before = await record(store, jid_of(raw))

    assert await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw), CANCELLED)]) == 0

    assert await record(store, jid_of(raw)) == before


# -- file_failure, give_back, promote ------------------------------------------------


async def test_a_failure_filed_for_a_retry_says_retrying_until_past_its_delay(
    store: Store
) -> None:
    raw = await running(store)

    assert await failed(store, raw, "retry", delay=300.0)

    fields = await record(store, jid_of(raw))
    assert (fields["state"], fields["attempt"], fields["error"]) == (
        "retrying", "2", "ValueError: boom")
    assert "finished_at" not in fields
    assert await ttl(store, jid_of(raw)) == pytest.approx(LIVE_TTL + 300, abs=SLACK)


@pytest.mark.parametrize("keep", [None, 120.0])
async def test_a_failure_filed_in_dead_ends_the_record(store: Store, keep: float | None) -> None:
    raw = await running(store)
    channel = store.keys.finished_channel(jid_of(raw))

    async with listening(store.client, channel) as next_message:
        assert await failed(store, raw, "dead", delay=0.0, keep=keep)

        if keep is None:  # keeps no result: its waiters poll
            assert await nothing_published(store.client, channel, next_message)
        else:
            assert await next_message() == b"dead"
    fields = await record(store, jid_of(raw))
    assert (fields["state"], fields["error"], fields["attempt"]) == (
        "dead", "ValueError: boom", "2")
    assert "finished_at" in fields
    assert await ttl(store, jid_of(raw)) == pytest.approx(keep or KEEP_STATUS, abs=SLACK)


async def test_a_second_filing_after_a_lost_reply_changes_nothing(store: Store) -> None:
    raw = await running(store)
    await failed(store, raw, "dead", delay=0.0)
    before = await record(store, jid_of(raw))

    assert await failed(store, raw, "retry") is False

    assert await record(store, jid_of(raw)) == before


async def test_give_back_says_queued_again_and_by_no_one(store: Store) -> None:
    raw = await running(store)

    assert await store.give_back(IDENTITY, QUEUE, raw)
    assert await store.give_back(IDENTITY, QUEUE, raw) is False  # a lost reply: again

    fields = await record(store, jid_of(raw))
    assert fields["state"] == "queued"
    assert "by" not in fields
    assert "started_at" not in fields
    assert await ttl(store, jid_of(raw)) > 0


async def test_promote_says_queued(store: Store) -> None:
    raw = make_job()
    await store.schedule(QUEUE, [raw], at=1.0)

    assert await promote_due(store, "schedule") == 1

    assert (await record(store, jid_of(raw)))["state"] == "queued"
    assert await ttl(store, jid_of(raw)) > 0


# -- requeue (recovery and shutdown), bury_orphan --------------------------------------


async def test_recovery_of_a_dead_process_says_queued_and_by_no_one(store: Store) -> None:
    raw = await running(store, OWNER)

    assert await recover_owner(store) == Requeued(moved=1)

    fields = await record(store, jid_of(raw))
    assert fields["state"] == "queued"
    assert "by" not in fields
    assert await ttl(store, jid_of(raw)) > 0


async def test_a_shutdown_requeue_says_queued_and_its_dropped_jobs_succeeded(
    store: Store, keys: Keys
) -> None:
    # Dropped: jobs that ran and whose ack failed; dropping them is their ack.
    unfinished, ran = await fetched(store, IDENTITY, [make_job(), make_job()])

    assert await store.requeue(IDENTITY, QUEUE, drop=[ran]) == 1

    assert (await record(store, jid_of(unfinished)))["state"] == "queued"
    fields = await record(store, jid_of(ran))
    assert fields["state"] == "succeeded"
    assert "finished_at" in fields
    assert await ttl(store, jid_of(ran)) == pytest.approx(KEEP_STATUS, abs=SLACK)
    assert await items(store, keys.queue(QUEUE)) == [unfinished]


async def test_a_buried_orphan_is_dead_with_its_error(store: Store, keys: Keys) -> None:
    raw = await running(store, OWNER)
    assert await recover_owner(store, max_orphanings=0) == Requeued(parked=1)

    assert await store.bury_orphan(QUEUE, raw, raw, jid_of(raw), error="ProcessDied: x3")

    fields = await record(store, jid_of(raw))
    assert (fields["state"], fields["error"]) == ("dead", "ProcessDied: x3")
    assert await ttl(store, jid_of(raw)) == pytest.approx(KEEP_STATUS, abs=SLACK)
    assert await store.client.zcard(keys.dead(QUEUE)) == 1


# -- cancel.lua ------------------------------------------------------------------------


async def test_cancelling_an_unknown_job_writes_nothing(store: Store, keys: Keys) -> None:
    assert await store.cancel_job(QUEUE, "never-enqueued") == "unknown"

    assert await store.client.keys(f"{keys.namespace}:*") == []


@pytest.mark.parametrize("state", ["succeeded", "dead", "cancelled"])
async def test_cancelling_a_finished_job_changes_nothing(store: Store, state: str) -> None:
    await finished_as(store, state, "order-42")
    before = await record(store, "order-42")

    assert await store.cancel_job(QUEUE, "order-42") == "finished"

    assert await record(store, "order-42") == before


@pytest.mark.parametrize(("state", "drop"), [
    ("queued", "fetch"), ("scheduled", "promote"), ("retrying", "promote")])
async def test_a_job_cancelled_before_it_runs_is_dropped_by_its_next_move(
    store: Store, keys: Keys, state: str, drop: str
) -> None:
    jid = "order-42"
    await alive_as(store, state, jid)
    target: SetName = "schedule" if state == "scheduled" else "retry"
    if drop == "promote":  # due now, so that the poller moves it
        zset = store.zset_key(QUEUE, target)
        await store.client.zadd(zset, {member: 1.0 for member, _ in await scored(store, zset)})

    async with listening(store.client, keys.finished_channel(jid)) as next_message:
        assert await store.cancel_job(QUEUE, jid) == "cancelled"
        assert await next_message() == b"cancelled"
    fields = await record(store, jid)
    assert (fields["state"], fields["cancel"]) == ("cancelled", "1")
    assert await store.cancel_job(QUEUE, jid) == "cancelled"  # again: the same answer...
    assert await record(store, jid) == fields  # ... and nothing changed

    if drop == "fetch":
        fetch = await store.fetch(IDENTITY, [QUEUE], 5)
        assert (fetch.jobs, fetch.cancelled) == ([], [(QUEUE, jid)])
    else:
        assert await promote_due(store, target) == 0

    assert await places(store, jid) == []
    fields = await record(store, jid)
    assert fields["state"] == "cancelled"
    assert "cancel" not in fields
    assert await ttl(store, jid) == pytest.approx(KEEP_STATUS, abs=SLACK)
    assert await store.cancel_job(QUEUE, jid) == "finished"


async def test_a_running_job_is_stopping_and_its_process_is_asked(
    store: Store, keys: Keys
) -> None:
    raw = await running(store)
    jid = jid_of(raw)

    assert await store.cancel_job(QUEUE, jid) == "stopping"

    fields = await record(store, jid)
    assert (fields["state"], fields["by"], fields["cancel"]) == ("running", IDENTITY, "1")
    cancels = keys.cancels(QUEUE, IDENTITY)
    assert await store.client.smembers(cancels) == {jid.encode()}
    assert 0 < await store.client.ttl(cancels) <= CANCELS_TTL
    # Again (a lost reply): the same answer, nothing changed.
    assert await store.cancel_job(QUEUE, jid) == "stopping"
    assert await record(store, jid) == fields
    assert await store.take_cancels(IDENTITY, [QUEUE]) == [(QUEUE, jid)]
    assert await store.client.exists(cancels) == 0
    # Its process stops it and acks it as cancelled.
    assert await store.ack(IDENTITY, QUEUE, [(raw, jid, CANCELLED)]) == 1
    fields = await record(store, jid)
    assert fields["state"] == "cancelled"
    assert "cancel" not in fields


async def test_a_cancel_set_of_another_type_refuses_the_cancel_before_marking_anything(
    store: Store, keys: Keys
) -> None:
    """A co-tenant's key where the process's cancel set goes: the cancel fails with an
    error naming the key, and the record does not say "cancel asked" of a job whose
    process was never told (issue 25, item 10)."""
    raw = await running(store)
    jid = jid_of(raw)
    cancels = keys.cancels(QUEUE, IDENTITY)
    await store.client.set(cancels, "a string, not a set")
    before = await record(store, jid)

    with pytest.raises(WrongTypeKey, match="cancel set") as caught:
        await store.cancel_job(QUEUE, jid)
    assert caught.value.key == cancels

    assert await record(store, jid) == before
    assert await store.client.get(cancels) == b"a string, not a set"
    # Once the key is gone, the cancel works.
    await store.client.delete(cancels)
    assert await store.cancel_job(QUEUE, jid) == "stopping"
    assert await store.client.smembers(cancels) == {jid.encode()}


@pytest.mark.parametrize("move", ["recover", "requeue", "give_back"])
async def test_a_stopping_job_whose_process_goes_is_dropped_not_requeued(
    store: Store, keys: Keys, move: str
) -> None:
    identity = OWNER if move == "recover" else IDENTITY
    raw = await running(store, identity)
    await store.client.set(keys.orphanings(QUEUE, jid_of(raw)), 1)
    assert await store.cancel_job(QUEUE, jid_of(raw)) == "stopping"

    if move == "recover":
        assert await recover_owner(store) == Requeued(cancelled=1)
    elif move == "requeue":
        assert await store.requeue(IDENTITY, QUEUE) == 0
    else:  # it had not started yet after all
        assert await store.give_back(IDENTITY, QUEUE, raw)

    assert await places(store, jid_of(raw)) == []
    fields = await record(store, jid_of(raw))
    assert fields["state"] == "cancelled"
    assert "cancel" not in fields
    assert "by" not in fields
    assert await ttl(store, jid_of(raw)) == pytest.approx(KEEP_STATUS, abs=SLACK)
    if move != "give_back":
        assert await store.client.exists(keys.orphanings(QUEUE, jid_of(raw))) == 0


async def test_recovery_that_only_dropped_cancelled_jobs_still_declares_the_owner_dead(
    store: Store, keys: Keys
) -> None:
    # Dropping a job is taking it: a paused OWNER that wakes must find the mark, or it
    # relists the job on its own list (relist.lua is refused only while marked), and a
    # later recovery would requeue it (its record no longer has a cancel waiting).
    raw = await running(store, OWNER)
    assert await store.cancel_job(QUEUE, jid_of(raw)) == "stopping"

    assert await recover_owner(store) == Requeued(cancelled=1)

    assert await store.client.sismember(keys.queue_declared_dead(QUEUE), OWNER)
    assert await store.relist(OWNER, QUEUE, [raw]) is None


async def test_a_fetch_on_a_cluster_reports_the_jobs_it_dropped(store: Store) -> None:
    store.cluster = True  # one call per queue: the cluster path, on one server
    raw = make_job()
    await store.enqueue("emails", [raw])
    await store.cancel_job("emails", jid_of(raw))

    fetch = await store.fetch(IDENTITY, ["reports", "emails"], 5)

    assert fetch.cancelled == [("emails", jid_of(raw))]


# -- progress.lua ----------------------------------------------------------------------


async def test_progress_is_written_while_this_process_runs_the_job(store: Store) -> None:
    raw = await running(store)

    await store.set_progress(IDENTITY, [(QUEUE, jid_of(raw), 0.25, b'{"step": 1}')])
    status = await store.job_status(jid_of(raw), [QUEUE])
    assert status is not None
    assert (status.progress, status.info) == (0.25, {"step": 1})

    await store.set_progress(IDENTITY, [(QUEUE, jid_of(raw), 0.5, None)])  # no info now
    fields = await record(store, jid_of(raw))
    assert fields["progress"] == "0.5"
    assert "info" not in fields


@pytest.mark.parametrize("case", ["another process", "queued", "ended", "no record"])
async def test_progress_is_refused_unless_the_record_says_this_process_runs_it(
    store: Store, keys: Keys, case: str
) -> None:
    raw = make_job()
    if case == "queued":
        await store.enqueue(QUEUE, [raw])
    elif case in ("another process", "ended"):
        await fetched(store, OWNER if case == "another process" else IDENTITY, [raw])
        if case == "ended":
            await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))])
    before = await record(store, jid_of(raw))

    reply = await run_raw(store, "progress", [keys.record(QUEUE, jid_of(raw))],
                          [IDENTITY, "0.5", '"late"'])

    assert reply == 0
    assert await record(store, jid_of(raw)) == before
    assert bool(await record(store, jid_of(raw))) == (case != "no record")


# -- a crash between steps: each step is one script ------------------------------------

PLACES = ("queue", "in_progress", "schedule", "retry", "dead", "repeat_orphans")
WHERE: dict[str, list[list[str]]] = {
    "queued": [["queue"]], "scheduled": [["schedule"]],
    "running": [["in_progress"], ["repeat_orphans"]], "retrying": [["retry"]],
    "dead": [["dead"]], "succeeded": [[]], "cancelled": [[]],
}
"""Where the copy of a job may be, for each state its record may say. A job parked in
repeat_orphans (recovered too often) still says running (by its dead process) until it
is buried: never free for a chosen jid's enqueue while a copy of it is kept."""


async def places(store: Store, jid: str) -> list[str]:
    """Every place of QUEUE where a copy of ``jid`` is (by jid: a filed entry is the
    job's payload updated)."""
    keys = store.keys
    found = []
    lists = {"queue": [keys.queue(QUEUE)], "repeat_orphans": [keys.repeat_orphans(QUEUE)],
             "in_progress": [keys.in_progress(QUEUE, who) for who in (IDENTITY, OWNER)]}
    zsets = {"schedule": keys.schedule(QUEUE), "retry": keys.retry(QUEUE),
             "dead": keys.dead(QUEUE)}
    for place in PLACES:
        raws = ([raw for key in lists[place] for raw in await items(store, key)]
                if place in lists else [m for m, _ in await scored(store, zsets[place])])
        found += [place for raw in raws if job_module.jid_of(raw) == jid]
    return found


async def assert_consistent(store: Store, jid: str) -> None:
    fields = await record(store, jid)
    where = await places(store, jid)
    if fields["state"] == "cancelled" and fields.get("cancel") == "1":
        # Cancelled before it ran: its copy waits for the next move to drop it.
        assert where in (["queue"], ["schedule"], ["retry"]), where
    else:
        assert where in WHERE[fields["state"]], (fields, where)
    assert await ttl(store, jid) > 0


Step = Callable[[Store, bytes], Awaitable[object]]
STEPS: dict[str, Step] = {
    "enqueue": lambda s, raw: s.enqueue(QUEUE, [raw]),
    "schedule": lambda s, raw: s.schedule(QUEUE, [raw], at=1.0),
    "fetch": lambda s, raw: s.fetch(IDENTITY, [QUEUE], 1),
    "owner fetch": lambda s, raw: s.fetch(OWNER, [QUEUE], 1),
    "retry": lambda s, raw: failed(s, raw, "retry", delay=0.0),
    "dead": lambda s, raw: failed(s, raw, "dead", delay=0.0),
    "promote schedule": lambda s, raw: promote_due(s, "schedule"),
    "promote retry": lambda s, raw: promote_due(s, "retry"),
    "give back": lambda s, raw: s.give_back(IDENTITY, QUEUE, raw),
    "cancel": lambda s, raw: s.cancel_job(QUEUE, jid_of(raw)),
    "ack": lambda s, raw: s.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))]),
    "ack cancelled": lambda s, raw: s.ack(IDENTITY, QUEUE, [(raw, jid_of(raw), CANCELLED)]),
    "recover": lambda s, raw: recover_owner(s),
    "park": lambda s, raw: recover_owner(s, max_orphanings=0),
    "bury": lambda s, raw: s.bury_orphan(QUEUE, raw, raw, jid_of(raw), error="E: died"),
    "requeue": lambda s, raw: s.requeue(IDENTITY, QUEUE),
}


@pytest.mark.parametrize(("steps", "end"), [
    ("enqueue, fetch, retry, promote retry, fetch, ack", "succeeded"),
    ("enqueue, fetch, give back, fetch, dead", "dead"),
    ("enqueue, owner fetch, recover, fetch, ack", "succeeded"),
    ("enqueue, owner fetch, park, bury", "dead"),
    ("enqueue, cancel, fetch", "cancelled"),
    ("schedule, cancel, promote schedule", "cancelled"),
    ("enqueue, fetch, retry, cancel, promote retry", "cancelled"),
    ("enqueue, fetch, cancel, ack cancelled", "cancelled"),
    ("enqueue, fetch, cancel, requeue", "cancelled"),
    ("enqueue, owner fetch, cancel, recover", "cancelled"),
    ("enqueue, fetch, cancel, give back", "cancelled"),
])
async def test_after_every_step_the_record_says_where_the_job_is(
    store: Store, steps: str, end: str
) -> None:
    raw = make_job()
    for step in steps.split(", "):
        await STEPS[step](store, raw)
        await assert_consistent(store, jid_of(raw))

    fields = await record(store, jid_of(raw))
    assert fields["state"] == end
    assert "cancel" not in fields


async def test_a_repeated_fetch_after_a_drop_finds_nothing_and_changes_nothing(
    store: Store
) -> None:
    raw = make_job()
    await store.enqueue(QUEUE, [raw])
    await store.cancel_job(QUEUE, jid_of(raw))
    assert (await store.fetch(IDENTITY, [QUEUE], 1)).cancelled == [(QUEUE, jid_of(raw))]
    before = await record(store, jid_of(raw))

    again = await store.fetch(IDENTITY, [QUEUE], 1)

    assert (again.jobs, again.cancelled) == ([], [])
    assert await record(store, jid_of(raw)) == before


# -- records that are missing, or not hashes -------------------------------------------


async def test_no_move_leaves_a_record_without_a_ttl(store: Store, keys: Keys) -> None:
    # Jobs without a record (pushed before records existed, or whose record expired)
    # move through every script; a record is then either absent or has a TTL.
    with_record, bare, scheduled_bare = make_job(), make_job(), make_job()
    await store.enqueue(QUEUE, [with_record])
    await store.client.lpush(keys.queue(QUEUE), bare)
    await store.file_entry(QUEUE, "schedule", scheduled_bare, 0.0)  # no record
    assert await promote_due(store, "schedule") == 1  # a record again (with its TTL):
    # a job retried by hand from dead after its record expired must be followed again
    assert (await record(store, jid_of(scheduled_bare)))["state"] == "queued"
    await store.fetch(IDENTITY, [QUEUE], 3)
    await store.client.hdel(keys.live_records(QUEUE), jid_of(bare), jid_of(scheduled_bare))
    assert await store.give_back(IDENTITY, QUEUE, bare)
    assert await record(store, jid_of(bare)) == {}
    await store.set_progress(IDENTITY, [(QUEUE, jid_of(scheduled_bare), 0.5, None)])
    assert await store.file_failure(IDENTITY, QUEUE, scheduled_bare, "retry",
                                    scheduled_bare, 0.0)  # no Failure: no record
    assert await promote_due(store, "retry") == 1
    await store.fetch(OWNER, [QUEUE], 3)
    assert await recover_owner(store) == Requeued(moved=2)
    [(_, first)] = (await store.fetch(IDENTITY, [QUEUE], 1)).jobs
    await store.ack(IDENTITY, QUEUE, [(first, jid_of(first))])
    assert await store.cancel_job(QUEUE, "never-enqueued") == "unknown"

    records = await store.client.keys(f"{keys.namespace}:*:job:*")
    live = await store.client.hgetall(keys.live_records(QUEUE))
    assert records or live, "the scenario wrote records"
    for key in records:
        assert await store.client.type(key) == b"string"  # a finished record, packed
        assert await store.client.ttl(key) > 0, key
    for jid, packed in live.items():  # a live record's bound, for the sweep
        assert float(unpack(packed)["until"]) > time.time(), jid


async def test_a_job_without_a_jid_has_no_record(store: Store, keys: Keys) -> None:
    [raw] = await fetched(store, IDENTITY, [NOT_UTF8])
    await store.ack(IDENTITY, QUEUE, [(raw, None)])

    assert await store.client.keys(f"{keys.namespace}:*:job:*") == []
    assert await store.client.hlen(keys.live_records(QUEUE)) == 0


@pytest.mark.parametrize("which", ["record key", "live hash"])
async def test_a_record_of_the_wrong_type_never_stops_a_move(
    store: Store, keys: Keys, which: str
) -> None:
    raw = make_job()
    key = keys.record(QUEUE, jid_of(raw)) if which == "record key" else keys.live_records(QUEUE)
    await store.client.set(key, "not a hash")

    await store.enqueue(QUEUE, [raw])
    assert await places(store, jid_of(raw)) == ["queue"]
    await store.fetch(IDENTITY, [QUEUE], 1)
    assert await places(store, jid_of(raw)) == ["in_progress"]
    assert await store.give_back(IDENTITY, QUEUE, raw)
    await store.fetch(IDENTITY, [QUEUE], 1)
    assert await failed(store, raw, "retry", delay=0.0)
    assert await promote_due(store, "retry") == 1
    await store.fetch(OWNER, [QUEUE], 1)
    assert await recover_owner(store) == Requeued(moved=1)
    await store.fetch(OWNER, [QUEUE], 1)
    assert await recover_owner(store, max_orphanings=0) == Requeued(parked=1)
    assert await store.bury_orphan(QUEUE, raw, raw, jid_of(raw), error="E: died")
    assert await places(store, jid_of(raw)) == ["dead"]
    await store.enqueue(QUEUE, [raw])  # run again by hand
    await store.fetch(IDENTITY, [QUEUE], 1)
    assert await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))]) == 1
    assert await places(store, jid_of(raw)) == ["dead"]  # the old entry, nothing else
    if which == "record key":  # damaged: the job's end wrote a record over it
        assert (await record(store, jid_of(raw)))["state"] == "succeeded"
    else:  # a live hash that is not one is never deleted (it may be a co-tenant's)
        assert await store.client.get(key) == b"not a hash"
    # A chosen jid starts a record that works; with a live hash that is not one, none.
    assert await store.enqueue(QUEUE, [raw], chosen=True) == 1
    assert (await record(store, jid_of(raw))).get("state") == (
        "queued" if which == "record key" else None)


# -- the hand-over's unsettled failures ------------------------------------------------


@pytest.mark.parametrize(("target", "state"), [("retry", "retrying"), ("dead", "dead")])
async def test_a_handed_over_failure_filed_later_no_longer_says_running(
    store: Store, target: SetName, state: str
) -> None:
    raw = await running(store)
    hand_over = b'{"set": "%s"}' % target.encode()  # the record's content is the caller's
    assert await store.park_unsettled(IDENTITY, QUEUE, raw, hand_over)
    assert (await record(store, jid_of(raw)))["state"] == "running"  # its process stopped

    assert await store.file_unsettled(QUEUE, hand_over, target, raw, 30.0)

    fields = await record(store, jid_of(raw))
    assert fields["state"] == state
    assert "by" not in fields
    assert await ttl(store, jid_of(raw)) > 0
    assert not await store.file_unsettled(QUEUE, hand_over, target, raw, 30.0)  # once


# -- moves by hand: the dashboard's kill, its deletes (move_member, close_record) -------


async def test_a_job_killed_from_the_retry_set_says_dead(store: Store) -> None:
    raw = await running(store)
    assert await failed(store, raw, "retry")
    assert (await record(store, jid_of(raw)))["state"] == "retrying"

    assert await store.move_member(QUEUE, "retry", "dead", raw, raw)

    assert (await record(store, jid_of(raw)))["state"] == "dead"
    assert await ttl(store, jid_of(raw)) == pytest.approx(KEEP_STATUS, abs=SLACK)
    assert not await store.move_member(QUEUE, "retry", "dead", raw, raw)  # gone: once


@pytest.mark.parametrize("state", ["queued", "scheduled", "retrying"])
async def test_a_waiting_job_removed_by_hand_says_cancelled(store: Store, state: str) -> None:
    raw = make_job()
    if state == "queued":
        await store.enqueue(QUEUE, [raw])
    elif state == "scheduled":
        await store.schedule(QUEUE, [raw], delay=3600)
    else:
        await fetched(store, IDENTITY, [raw])
        assert await failed(store, raw, "retry")

    await store.close_records([(QUEUE, raw)])

    fields = await record(store, jid_of(raw))
    assert fields["state"] == "cancelled"
    assert "cancel" not in fields  # nothing left to drop: the jid may be used again
    assert await ttl(store, jid_of(raw)) == pytest.approx(KEEP_STATUS, abs=SLACK)


async def test_closing_leaves_finished_and_missing_records_alone(store: Store) -> None:
    done = await running(store)
    await store.ack(IDENTITY, QUEUE, [(done, jid_of(done))])
    ghost = make_job()

    await store.close_records([(QUEUE, done), (QUEUE, ghost)])

    assert (await record(store, jid_of(done)))["state"] == "succeeded"
    assert await store.client.exists(store.keys.record(QUEUE, jid_of(ghost))) == 0


# -- an upgrade: records earlier builds wrote (one key per job, whatever its state) -----


async def as_written_by_0_2(store: Store, raw: bytes, state: str = "queued",
                            ttl: int = 3600) -> str:
    """``raw`` on QUEUE with the record an earlier build wrote for it: a hash at its
    key, with a TTL."""
    jid = jid_of(raw)
    await store.client.lpush(store.keys.queue(QUEUE), raw)
    key = store.keys.record(QUEUE, jid)
    await store.client.hset(key, mapping={"state": state, "name": "send_email",
                                          "enqueued_at": "1700000000.5"})
    await store.client.expire(key, ttl)
    return jid


async def test_a_0_2_record_is_read_and_moves_to_the_live_hash_at_its_next_move(
    store: Store, keys: Keys
) -> None:
    raw = make_job()
    jid = await as_written_by_0_2(store, raw)
    assert (await store.job_status(jid, [QUEUE])).state == "queued"
    assert await store.alive_in(jid, [QUEUE]) == [QUEUE]

    await store.fetch(IDENTITY, [QUEUE], 1)

    # Moved: a live field now, its fields kept, bounded by what its key had left.
    assert await store.client.exists(keys.record(QUEUE, jid)) == 0
    found = await store.job_status(jid, [QUEUE])
    assert (found.state, found.process, found.name, found.enqueued_at) == (
        "running", IDENTITY, "send_email", 1700000000.5)
    assert 3600 - SLACK <= await ttl(store, jid) <= 3600
    await store.ack(IDENTITY, QUEUE, [(raw, jid)])
    assert (await store.job_status(jid, [QUEUE])).state == "succeeded"
    assert await store.client.hexists(keys.live_records(QUEUE), jid) == 0


async def test_a_0_2_record_of_a_queued_job_can_be_cancelled(store: Store, keys: Keys) -> None:
    raw = make_job()
    jid = await as_written_by_0_2(store, raw)

    assert await store.cancel_job(QUEUE, jid) == "cancelled"
    assert await store.cancel_job(QUEUE, jid) == "cancelled"  # the first's answer

    fetched_now = await store.fetch(IDENTITY, [QUEUE], 1)
    assert fetched_now.jobs == []  # dropped unrun
    found = await store.job_status(jid, [QUEUE])
    assert (found.state, found.cancel_requested) == ("cancelled", False)
    assert 0 < await ttl(store, jid) <= KEEP_STATUS


async def test_a_0_2_record_of_a_finished_job_is_read_until_it_expires(
    store: Store, keys: Keys
) -> None:
    jid = "done-in-0.2"
    key = keys.record(QUEUE, jid)
    await store.client.hset(key, mapping={"state": "succeeded", "result": "42",
                                          "finished_at": "1700000001.0"})
    await store.client.expire(key, 600)

    found = await store.job_status(jid, [QUEUE])
    assert (found.state, found.result, found.has_result) == ("succeeded", 42, True)
    assert await store.alive_in(jid, [QUEUE]) == []


async def test_a_live_records_bound_counts_from_redis_clock_not_the_callers(
    store: Store, keys: Keys
) -> None:
    # An enqueuer whose clock is a year behind: its job's record must not be born past
    # its bound (the sweep would drop it while the job waits).
    raw = make_job()
    reply = await run_raw(store, "enqueue", [keys.queue(QUEUE)], [
        QUEUE, keys.wake_channel, keys.record_prefix(QUEUE), LIVE_TTL,
        repr(time.time() - 366 * 24 * 3600), "send_email", "0", "", "", jid_of(raw), raw])

    assert reply == [1]
    assert LIVE_TTL - SLACK <= await ttl(store, jid_of(raw)) <= LIVE_TTL
    assert await store.sweep_records(QUEUE) == ("0", 0)
    assert (await record(store, jid_of(raw)))["state"] == "queued"
