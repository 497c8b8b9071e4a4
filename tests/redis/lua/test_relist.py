"""relist.lua: a process whose keys Redis lost lists its in-flight jobs again, on its
in-progress list for their queue."""

from __future__ import annotations

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import NOT_UTF8, fetched, items, make_job

IDENTITY = "host:1:abc"
QUEUE = "default"


async def test_lists_again_only_what_is_missing(store: Store, keys: Keys) -> None:
    [kept] = await fetched(store, IDENTITY, [make_job()])
    lost = make_job()

    assert await store.relist(IDENTITY, QUEUE, [kept, lost, NOT_UTF8]) == 2

    assert sorted(await items(store, keys.in_progress(QUEUE, IDENTITY))) == sorted(
        [kept, lost, NOT_UTF8])


async def test_lists_on_the_queues_own_list(store: Store, keys: Keys) -> None:
    emails, reports = make_job("emails"), make_job("reports")

    assert await store.relist(IDENTITY, "emails", [emails]) == 1
    assert await store.relist(IDENTITY, "reports", [reports]) == 1

    assert await items(store, keys.in_progress("emails", IDENTITY)) == [emails]
    assert await items(store, keys.in_progress("reports", IDENTITY)) == [reports]


async def test_is_safe_to_run_twice(store: Store, keys: Keys) -> None:
    jobs = [make_job(), make_job()]
    await store.relist(IDENTITY, QUEUE, jobs)

    assert await store.relist(IDENTITY, QUEUE, jobs) == 0
    assert len(await items(store, keys.in_progress(QUEUE, IDENTITY))) == 2


async def test_lists_nothing_while_the_process_is_marked_declared_dead(
    store: Store, keys: Keys
) -> None:
    # Its jobs were recovered elsewhere: listed again here, they would run twice (the
    # fencing would not cancel them, their settles would file them again).
    await store.client.sadd(keys.queue_declared_dead(QUEUE), IDENTITY)

    assert await store.relist(IDENTITY, QUEUE, [make_job()]) is None

    assert await items(store, keys.in_progress(QUEUE, IDENTITY)) == []
    await store.clear_declared_dead(IDENTITY, [QUEUE])
    assert await store.relist(IDENTITY, QUEUE, [make_job()]) == 1
