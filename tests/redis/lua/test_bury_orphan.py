"""bury_orphan.lua: a job parked in its queue's repeat_orphans (its process died running
it more than ``max_orphanings`` times) is filed in that queue's dead set, head first, its
orphan counter cleared. The failure is counted in the stats (the namespace's slot, not
the script's) by ``Store.bury_orphan`` once the script buried the job.
"""

from __future__ import annotations

import json

import pytest
import redis

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import Requeued
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import (
    NOT_UTF8,
    fetched,
    items,
    jid_of,
    make_job,
    plant_wrong_type,
    redis_now,
    run_raw,
    scored,
    still_planted,
)

OWNER = "dead-host:7:f00"
QUEUE = "default"


def died_entry(raw: bytes) -> bytes:
    """The dead entry recovery writes for a job that kept killing its process."""
    payload = json.loads(raw)
    payload.update(error_class="ProcessDied", error_message="died 3 times",
                   orphaned_from=OWNER)
    return json.dumps(payload).encode()


async def parked(store: Store, keys: Keys, count: int, queue: str = QUEUE) -> list[bytes]:
    """``count`` jobs parked by a real recovery (their counters bumped), head first."""
    await fetched(store, OWNER, [make_job(queue) for _ in range(count)], queue=queue)
    assert await store.recover(OWNER, queue, dead_for=60.0,
                               max_orphanings=0) == Requeued(parked=count)
    parked = await store.list_head(keys.repeat_orphans(queue), 100)
    assert len(parked) == count
    return parked


async def bury(store: Store, raw: bytes, queue: str = QUEUE) -> bool:
    return await store.bury_orphan(queue, raw, died_entry(raw), jid_of(raw))


async def failed(store: Store, keys: Keys) -> int:
    return int(await store.client.get(keys.stats_failed) or 0)


async def counter_exists(store: Store, keys: Keys, raw: bytes) -> bool:
    return bool(await store.client.exists(keys.orphanings(QUEUE, jid_of(raw))))


async def test_buries_the_head_in_dead_at_the_time_of_death(store: Store, keys: Keys) -> None:
    head, rest = await parked(store, keys, 2)

    before = await redis_now(store)
    assert await bury(store, head) is True
    after = await redis_now(store)

    [(member, score)] = await scored(store, keys.dead(QUEUE))
    assert member == died_entry(head)
    assert before <= score <= after
    assert await items(store, keys.repeat_orphans(QUEUE)) == [rest]


async def test_buries_in_its_own_queues_dead_set_only(store: Store, keys: Keys) -> None:
    [emails] = await parked(store, keys, 1, "emails")
    [reports] = await parked(store, keys, 1, "reports")

    assert await bury(store, emails, "emails") is True

    assert [m for m, _ in await scored(store, keys.dead("emails"))] == [died_entry(emails)]
    assert await store.client.exists(keys.dead("reports")) == 0
    assert await items(store, keys.repeat_orphans("reports")) == [reports]
    # Not the other queue's head: nothing is buried out of its queue.
    assert await bury(store, emails, "reports") is False


async def test_counts_the_failure_in_todays_history_too(store: Store, keys: Keys) -> None:
    head, _ = await parked(store, keys, 2)
    await bury(store, head)
    [day_key] = await store.client.keys(keys.stats_failed_on("*"))
    assert await store.client.get(day_key) == b"1"
    assert await store.client.ttl(day_key) > 300 * 24 * 3600


async def test_counts_a_failure_and_clears_the_orphan_counter(store: Store, keys: Keys) -> None:
    head, rest = await parked(store, keys, 2)
    await store.client.set(keys.stats_failed, 41)
    assert await counter_exists(store, keys, head)

    await bury(store, head)

    assert await failed(store, keys) == 42
    assert not await counter_exists(store, keys, head)
    assert await counter_exists(store, keys, rest), "the next one's counter is kept"


async def test_the_script_alone_counts_nothing(store: Store, keys: Keys) -> None:
    # The stats are in the namespace's slot: the script stays in the queue's, and the
    # Store counts the burial after it.
    [head] = await parked(store, keys, 1)

    buried = await run_raw(
        store, "bury_orphan",
        [keys.repeat_orphans(QUEUE), keys.dead(QUEUE), keys.orphanings(QUEUE, jid_of(head))],
        [head, died_entry(head), repr(await redis_now(store)), "0", "0"],
    )

    assert buried == 1
    assert [m for m, _ in await scored(store, keys.dead(QUEUE))] == [died_entry(head)]
    assert not await counter_exists(store, keys, head)
    assert await store.client.exists(keys.stats_failed) == 0
    assert await store.client.keys(keys.stats_failed_on("*")) == []


async def test_only_the_head_is_buried(store: Store, keys: Keys) -> None:
    # The caller walks the list in order; a job further down is not buried out of turn.
    head, rest = await parked(store, keys, 2)

    assert await bury(store, rest) is False

    assert await store.client.exists(keys.dead(QUEUE)) == 0
    assert await items(store, keys.repeat_orphans(QUEUE)) == [head, rest]
    assert await failed(store, keys) == 0
    assert await counter_exists(store, keys, rest)


async def test_a_second_call_after_a_lost_reply_changes_nothing(
    store: Store, keys: Keys
) -> None:
    head, rest = await parked(store, keys, 2)
    await bury(store, head)
    dead = await scored(store, keys.dead(QUEUE))

    assert await bury(store, head) is False

    assert await scored(store, keys.dead(QUEUE)) == dead
    assert await items(store, keys.repeat_orphans(QUEUE)) == [rest]
    assert await failed(store, keys) == 1


async def test_nothing_parked_is_a_no_op(store: Store, keys: Keys) -> None:
    raw = make_job()

    assert await bury(store, raw) is False

    assert await store.client.exists(keys.dead(QUEUE), keys.stats_failed) == 0


async def test_walking_the_list_buries_every_job_in_order(store: Store, keys: Keys) -> None:
    jobs = await parked(store, keys, 3)

    for raw in await store.list_head(keys.repeat_orphans(QUEUE), 100):
        assert await bury(store, raw) is True

    assert await store.client.exists(keys.repeat_orphans(QUEUE)) == 0
    assert sorted(m for m, _ in await scored(store, keys.dead(QUEUE))) == sorted(
        map(died_entry, jobs))
    assert await failed(store, keys) == 3


async def test_a_job_that_is_not_utf8_is_buried_byte_for_byte(store: Store, keys: Keys) -> None:
    await store.client.rpush(keys.repeat_orphans(QUEUE), NOT_UTF8)
    entry = json.dumps({"jid": "x", "class": None, "error_class": "ProcessDied"}).encode()

    assert await store.bury_orphan(QUEUE, NOT_UTF8, entry, None) is True

    assert [m for m, _ in await scored(store, keys.dead(QUEUE))] == [entry]
    assert await store.client.exists(keys.repeat_orphans(QUEUE)) == 0


async def test_a_different_byte_is_a_different_job(store: Store, keys: Keys) -> None:
    await store.client.rpush(keys.repeat_orphans(QUEUE), NOT_UTF8)
    # What a lossy decode and re-encode would hand back.
    mangled = NOT_UTF8.decode("utf-8", "replace").encode()

    assert await store.bury_orphan(QUEUE, mangled, b"{}", None) is False

    assert await items(store, keys.repeat_orphans(QUEUE)) == [NOT_UTF8]


async def test_a_dead_set_of_the_wrong_type_leaves_the_job_parked(
    store: Store, keys: Keys
) -> None:
    # Written before removed: Redis does not roll a script back.
    [head] = await parked(store, keys, 1)
    await plant_wrong_type(store, keys.dead(QUEUE))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await bury(store, head)

    assert await items(store, keys.repeat_orphans(QUEUE)) == [head]
    assert await still_planted(store, keys.dead(QUEUE))
    assert await failed(store, keys) == 0
    assert await counter_exists(store, keys, head)


@pytest.mark.parametrize("which", ["stats", "counter"])
async def test_bookkeeping_of_the_wrong_type_does_not_stop_the_burial(
    store: Store, keys: Keys, which: str
) -> None:
    [head] = await parked(store, keys, 1)
    planted = keys.stats_failed if which == "stats" else keys.orphanings(QUEUE, jid_of(head))
    await store.client.delete(planted)
    await plant_wrong_type(store, planted)

    assert await bury(store, head) is True

    assert [m for m, _ in await scored(store, keys.dead(QUEUE))] == [died_entry(head)]
    assert await store.client.exists(keys.repeat_orphans(QUEUE)) == 0


async def test_a_repeat_orphans_list_of_the_wrong_type_is_an_error(
    store: Store, keys: Keys
) -> None:
    await plant_wrong_type(store, keys.repeat_orphans(QUEUE))

    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await bury(store, make_job())

    assert await still_planted(store, keys.repeat_orphans(QUEUE))
    assert await store.client.exists(keys.dead(QUEUE)) == 0


async def test_the_callers_clock_is_only_a_fallback(store: Store, keys: Keys) -> None:
    [head] = await parked(store, keys, 1)
    now = await redis_now(store)

    buried = await run_raw(
        store, "bury_orphan",
        [keys.repeat_orphans(QUEUE), keys.dead(QUEUE), keys.orphanings(QUEUE, jid_of(head))],
        [head, died_entry(head), repr(now - 86_400)],
    )

    assert buried == 1
    [(_, score)] = await scored(store, keys.dead(QUEUE))
    assert score == pytest.approx(now, abs=5)
