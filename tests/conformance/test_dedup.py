"""Dedup, the same on Redis and in the fake: a unique job's duplicate, and the three
modes of one key (throttle, debounce, coalesce)."""

from __future__ import annotations

from tests.conformance.conftest import Backend


async def test_a_unique_jobs_duplicate_is_refused_until_it_ran(backend: Backend) -> None:
    app = backend.app()
    ran: list[int] = []

    @app.job(unique=True)
    async def sync(account: int) -> None:
        ran.append(account)

    first = await sync.enqueue(1)
    assert first is not None
    assert await sync.enqueue(1) is None
    assert await sync.enqueue(2) is not None  # other arguments: another job
    await backend.run(app, until=lambda: len(ran) == 2)
    assert sorted(ran) == [1, 2]
    assert await sync.enqueue(1) is not None  # ran: the lock went with it


async def test_throttle_runs_the_first_of_a_key_and_refuses_the_rest(backend: Backend) -> None:
    app = backend.app()
    ran: list[int] = []

    @app.job
    async def sync_crm(customer: int) -> None:
        ran.append(customer)

    throttled = sync_crm.options(throttle=60, key="crm")
    assert await throttled.enqueue(1) is not None
    assert await throttled.enqueue(2) is None
    await backend.run(app, until=lambda: len(ran) == 1)
    assert await throttled.enqueue(3) is None  # even after the first ran: the window holds
    assert ran == [1]


async def test_debounce_runs_a_burst_once_with_the_last_arguments(backend: Backend) -> None:
    app = backend.app()
    ran: list[int] = []

    @app.job
    async def reindex(version: int) -> None:
        ran.append(version)

    debounced = reindex.options(debounce=0.3, key="doc")
    jids = [await debounced.enqueue(version) for version in (1, 2, 3)]
    assert jids[0] is not None
    assert jids == [jids[0]] * 3
    assert (await app.status(jids[0])).state == "scheduled"
    await backend.run(app, until=lambda: len(ran) == 1)
    assert ran == [3]


async def test_coalesce_merges_into_the_waiting_job(backend: Backend) -> None:
    app = backend.app()
    ran: list[int] = []

    @app.job
    async def rebuild(version: int) -> None:
        ran.append(version)

    coalesced = rebuild.options(coalesce=True, key="cache")
    jids = [await coalesced.enqueue(version) for version in (1, 2)]
    assert jids[0] is not None
    assert jids == [jids[0]] * 2
    await backend.run(app, until=lambda: len(ran) == 1)
    assert ran == [2]
    assert (await app.status(jids[0])).state == "succeeded"
    assert await coalesced.enqueue(3) not in (None, jids[0])  # it ran: a new job
