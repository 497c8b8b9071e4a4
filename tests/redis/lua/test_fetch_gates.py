"""fetch.lua's gates: a paused queue is skipped, and a queue with a limit gives only what
its limit leaves once every process's running jobs of it are counted (from their
in-progress lists: whatever empties a list frees its share)."""

from __future__ import annotations

from cogworker_async.jobs.status import LIVE_TTL
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from cogworker_async.settings import KEEP_STATUS
from tests.redis.lua.helpers import make_job, run_raw

ME, OTHER, GONE = "host:1:me", "host:2:other", "host:3:gone"


async def _running_elsewhere(store: Store, keys: Keys, queue: str, identity: str,
                             count: int) -> None:
    """``count`` jobs of ``queue`` on ``identity``'s in-progress list, ``identity``
    registered in the queue's slot as a beat does it."""
    await store.client.sadd(keys.queue_identities(queue), identity)
    for _ in range(count):
        await store.client.lpush(keys.in_progress(queue, identity), make_job(queue))


async def test_a_paused_queue_gives_nothing_and_the_next_queue_is_tried(
    store: Store, keys: Keys
) -> None:
    reports, emails = make_job("reports"), make_job("emails")
    await store.enqueue("reports", [reports])
    await store.enqueue("emails", [emails])
    assert await store.pause("reports")

    fetched = await store.fetch(ME, ["reports", "emails"], 10)

    assert fetched.jobs == [("emails", emails)]
    assert fetched.bad_queues == []
    assert await store.client.lrange(keys.queue("reports"), 0, -1) == [reports]


async def test_a_resumed_queue_gives_its_jobs_in_order(store: Store) -> None:
    jobs = [make_job("reports") for _ in range(3)]
    await store.enqueue("reports", jobs)
    await store.pause("reports")
    assert (await store.fetch(ME, ["reports"], 10)).jobs == []
    assert await store.resume("reports")
    assert not await store.resume("reports")  # said once

    assert [raw for _, raw in (await store.fetch(ME, ["reports"], 10)).jobs] == jobs


async def test_a_second_pause_keeps_the_first(store: Store) -> None:
    assert await store.pause("reports", by="ops")
    assert not await store.pause("reports", by="someone else")
    pauses = await store.pauses(["reports", "emails"])
    assert list(pauses) == ["reports"]
    assert pauses["reports"].by == "ops"
    assert pauses["reports"].since > 0


async def test_an_unreadable_pause_flag_still_pauses(store: Store, keys: Keys) -> None:
    await store.client.set(keys.paused("reports"), b"\xff not json")
    await store.enqueue("reports", [make_job("reports")])
    assert (await store.fetch(ME, ["reports"], 10)).jobs == []
    assert (await store.pauses(["reports"]))["reports"].since == 0.0


async def test_a_limit_counts_other_processes_running_jobs(store: Store, keys: Keys) -> None:
    jobs = [make_job("reports") for _ in range(5)]
    await store.enqueue("reports", jobs)
    await _running_elsewhere(store, keys, "reports", OTHER, 2)

    fetched = await store.fetch(ME, ["reports"], 10, {"reports": 3})

    assert [raw for _, raw in fetched.jobs] == jobs[:1]
    assert (await store.fetch(ME, ["reports"], 10, {"reports": 3})).jobs == []


async def test_a_limit_counts_this_process_own_list_before_its_first_beat(
    store: Store, keys: Keys
) -> None:
    await store.enqueue("reports", [make_job("reports") for _ in range(5)])
    assert len((await store.fetch(ME, ["reports"], 2, {"reports": 3})).jobs) == 2
    # Not registered in the slot yet: its own list is counted all the same.
    assert len((await store.fetch(ME, ["reports"], 10, {"reports": 3})).jobs) == 1


async def test_a_share_comes_back_when_a_list_is_emptied(store: Store, keys: Keys) -> None:
    """Recovery of a dead process, an ack, a filing: each empties the list it counts."""
    await store.enqueue("reports", [make_job("reports") for _ in range(4)])
    await _running_elsewhere(store, keys, "reports", GONE, 2)
    assert (await store.fetch(ME, ["reports"], 10, {"reports": 2})).jobs == []

    await store.client.delete(keys.in_progress("reports", GONE))

    assert len((await store.fetch(ME, ["reports"], 10, {"reports": 2})).jobs) == 2


async def test_a_limit_binds_only_its_own_queue(store: Store, keys: Keys) -> None:
    await store.enqueue("reports", [make_job("reports") for _ in range(3)])
    await store.enqueue("emails", [make_job("emails") for _ in range(3)])

    fetched = await store.fetch(ME, ["reports", "emails"], 10, {"reports": 1})

    assert [queue for queue, _ in fetched.jobs] == ["reports", "emails", "emails", "emails"]


async def test_over_the_limit_takes_nothing_and_never_goes_negative(
    store: Store, keys: Keys
) -> None:
    """More running than the limit (it was lowered): nothing is taken, nothing is put back."""
    await store.enqueue("reports", [make_job("reports")])
    await _running_elsewhere(store, keys, "reports", OTHER, 5)
    assert (await store.fetch(ME, ["reports"], 10, {"reports": 2})).jobs == []
    assert await store.client.llen(keys.queue("reports")) == 1
    assert await store.client.llen(keys.in_progress("reports", OTHER)) == 5


async def test_the_old_argument_layout_fetches_without_gates(store: Store, keys: Keys) -> None:
    """A caller that sends no slot prefixes (a process of the previous release during a
    rolling upgrade) fetches as before: no pause check, no limit."""
    job = make_job("reports")
    await store.enqueue("reports", [job])
    await store.pause("reports")

    reply = await run_raw(store, "fetch", [keys.queue("reports"),
                                           keys.in_progress("reports", ME)],
                          [10, ME, "1700000000.0", KEEP_STATUS, LIVE_TTL, "",
                           keys.record_prefix("reports")])

    assert reply == [[1, job], [], []]


async def test_a_limit_that_cannot_be_counted_holds_the_queue_and_spares_the_others(
    store: Store, keys: Keys
) -> None:
    """Bad data in the slot (the registry, or another process's list, of the wrong
    type): the limited queue is taken as full, never as unlimited, and the next queue is
    fetched as usual."""
    await store.enqueue("reports", [make_job("reports")])
    emails = make_job("emails")
    await store.enqueue("emails", [emails])
    await store.client.set(keys.queue_identities("reports"), "not a set")

    fetched = await store.fetch(ME, ["reports", "emails"], 10, {"reports": 5})
    assert fetched.jobs == [("emails", emails)]

    await store.client.delete(keys.queue_identities("reports"))
    await store.client.sadd(keys.queue_identities("reports"), OTHER)
    await store.client.set(keys.in_progress("reports", OTHER), "not a list")
    assert (await store.fetch(ME, ["reports"], 10, {"reports": 5})).jobs == []
    assert await store.client.llen(keys.queue("reports")) == 1
