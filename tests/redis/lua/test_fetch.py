"""fetch.lua: move jobs from queues, tried in order, each onto this process's in-progress
list for its queue (one ``(queue, list)`` pair per queue, both in the queue's slot)."""

from __future__ import annotations

import pytest
import redis

from cogworker_async.jobs.status import LIVE_TTL
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from cogworker_async.settings import KEEP_STATUS
from tests.redis.lua.helpers import (
    NOT_UTF8,
    items,
    jid_of,
    make_job,
    plant_wrong_type,
    run_raw,
    still_planted,
    stored_record,
)

IDENTITY = "host:1:abc"


async def test_moves_jobs_first_enqueued_first_fetched(store: Store, keys: Keys) -> None:
    jobs = [make_job("emails") for _ in range(3)]
    await store.enqueue("emails", jobs)

    fetched = await store.fetch(IDENTITY, ["emails"], 10)

    assert fetched.jobs == [("emails", job) for job in jobs]
    assert fetched.bad_queues == []
    assert await store.client.llen(keys.queue("emails")) == 0
    # Newest fetched at the head: requeue.lua relies on this to keep the order.
    assert await items(store, keys.in_progress("emails", IDENTITY)) == jobs[::-1]


async def test_drains_queues_in_strict_order(store: Store) -> None:
    high = [make_job("high") for _ in range(2)]
    low = [make_job("low") for _ in range(3)]
    await store.enqueue("low", low)
    await store.enqueue("high", high)

    fetched = await store.fetch(IDENTITY, ["high", "low"], 4)

    assert fetched.jobs == [("high", high[0]), ("high", high[1]), ("low", low[0]),
                            ("low", low[1])]


async def test_each_job_goes_onto_its_own_queues_list(store: Store, keys: Keys) -> None:
    high = [make_job("high") for _ in range(2)]
    low = [make_job("low") for _ in range(3)]
    await store.enqueue("low", low)
    await store.enqueue("high", high)

    await store.fetch(IDENTITY, ["high", "low"], 4)

    assert await items(store, keys.in_progress("high", IDENTITY)) == high[::-1]
    assert await items(store, keys.in_progress("low", IDENTITY)) == low[:2][::-1]
    assert await items(store, keys.queue("low")) == [low[2]]


async def test_two_pairs_in_one_call_each_move_onto_their_own_list(
    store: Store, keys: Keys
) -> None:
    # The script's contract, called as a single Redis gets it: KEYS = (queue, list) pairs,
    # ARGV[6] = "" (no priority aging), ARGV[6 + i] = the i-th pair's record prefix; the
    # reply names each job's pair by its 1-based index (and nothing dropped: no cancel
    # waits).
    emails, reports = make_job("emails"), make_job("reports")
    await store.enqueue("emails", [emails])
    await store.enqueue("reports", [reports])

    reply = await run_raw(store, "fetch", [
        keys.queue("emails"), keys.in_progress("emails", IDENTITY),
        keys.queue("reports"), keys.in_progress("reports", IDENTITY),
    ], [10, IDENTITY, "1700000000.0", KEEP_STATUS, LIVE_TTL, "",
        keys.record_prefix("emails"), keys.record_prefix("reports")])

    assert reply == [[1, emails, 2, reports], [], []]
    assert await items(store, keys.in_progress("emails", IDENTITY)) == [emails]
    assert await items(store, keys.in_progress("reports", IDENTITY)) == [reports]
    assert await store.client.exists(keys.queue("emails"), keys.queue("reports")) == 0
    # Each record is found through its own pair's prefix (its queue's slot).
    for queue, job in (("emails", emails), ("reports", reports)):
        fields = await stored_record(store.client, keys, queue, jid_of(job))
        assert [fields.get("state"), fields.get("by")] == ["running", IDENTITY]


async def test_count_is_respected_and_the_rest_stays_queued(store: Store, keys: Keys) -> None:
    jobs = [make_job("emails") for _ in range(5)]
    await store.enqueue("emails", jobs)

    fetched = await store.fetch(IDENTITY, ["emails"], 2)

    assert [raw for _, raw in fetched.jobs] == jobs[:2]
    assert await store.client.llen(keys.queue("emails")) == 3
    assert await store.client.llen(keys.in_progress("emails", IDENTITY)) == 2
    assert [raw for _, raw in (await store.fetch(IDENTITY, ["emails"], 10)).jobs] == jobs[2:]


async def test_count_zero_moves_nothing(store: Store, keys: Keys) -> None:
    await store.enqueue("emails", [make_job("emails")])

    fetched = await store.fetch(IDENTITY, ["emails"], 0)

    assert fetched.jobs == []
    assert await store.client.llen(keys.queue("emails")) == 1


async def test_no_queues_fetches_nothing(store: Store, keys: Keys) -> None:
    await store.enqueue("emails", [make_job("emails")])

    fetched = await store.fetch(IDENTITY, [], 5)

    assert fetched.jobs == []
    assert fetched.bad_queues == []
    assert await store.client.exists(keys.in_progress("emails", IDENTITY)) == 0


async def test_empty_queues_fetch_nothing(store: Store, keys: Keys) -> None:
    fetched = await store.fetch(IDENTITY, ["emails", "reports"], 5)

    assert fetched.jobs == []
    assert fetched.bad_queues == []
    assert await store.client.exists(keys.in_progress("emails", IDENTITY),
                                     keys.in_progress("reports", IDENTITY)) == 0


async def test_a_queue_of_the_wrong_type_is_skipped_and_reported(
    store: Store, keys: Keys
) -> None:
    await plant_wrong_type(store, keys.queue("broken"))
    good = [make_job("emails"), make_job("emails")]
    await store.enqueue("emails", good)

    fetched = await store.fetch(IDENTITY, ["broken", "emails"], 5)

    assert fetched.bad_queues == ["broken"]
    assert fetched.jobs == [("emails", job) for job in good]
    assert await still_planted(store, keys.queue("broken"))


async def test_a_job_that_is_not_utf8_is_moved_byte_for_byte(store: Store, keys: Keys) -> None:
    await store.enqueue("default", [NOT_UTF8])

    fetched = await store.fetch(IDENTITY, ["default"], 1)

    assert fetched.jobs == [("default", NOT_UTF8)]
    assert await items(store, keys.in_progress("default", IDENTITY)) == [NOT_UTF8]


async def test_an_in_progress_key_of_the_wrong_type_leaves_jobs_queued(
    store: Store, keys: Keys
) -> None:
    job = make_job("emails")
    await store.enqueue("emails", [job])
    await plant_wrong_type(store, keys.in_progress("emails", IDENTITY))

    with pytest.raises(redis.exceptions.ResponseError, match="in-progress list"):
        await store.fetch(IDENTITY, ["emails"], 5)

    assert await items(store, keys.queue("emails")) == [job]
    assert await still_planted(store, keys.in_progress("emails", IDENTITY))


async def test_any_in_progress_key_of_the_wrong_type_moves_nothing_at_all(
    store: Store, keys: Keys
) -> None:
    # Every pair's list is checked before the first move: the second pair's broken list
    # does not let the first pair's jobs move and then fail halfway.
    first, second = make_job("emails"), make_job("reports")
    await store.enqueue("emails", [first])
    await store.enqueue("reports", [second])
    await plant_wrong_type(store, keys.in_progress("reports", IDENTITY))

    with pytest.raises(redis.exceptions.ResponseError, match="in-progress list"):
        await store.fetch(IDENTITY, ["emails", "reports"], 5)

    assert await items(store, keys.queue("emails")) == [first]
    assert await items(store, keys.queue("reports")) == [second]
    assert await store.client.exists(keys.in_progress("emails", IDENTITY)) == 0
