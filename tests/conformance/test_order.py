"""Who runs next, the same on Redis and in the fake: priorities (aging off: the fake does
not model aging, docs/guides/testing.md), fair groups' turns, a group's limit."""

from __future__ import annotations

import anyio

from tests.conformance.conftest import Backend


async def test_a_higher_priority_runs_sooner_and_one_priority_is_fifo(backend: Backend) -> None:
    app = backend.app(concurrency=1, priority_aging=None)
    ran: list[str] = []

    @app.job(priority=5)
    async def charge(order: int) -> None:
        ran.append(f"charge {order}")

    @app.job
    async def thumbnail(image: int) -> None:
        ran.append(f"thumbnail {image}")

    await thumbnail.enqueue(1)
    await charge.enqueue(7)
    await thumbnail.options(priority=-3).enqueue(2)
    await charge.enqueue(8)
    await thumbnail.options(priority=10).enqueue(3)
    await backend.run(app, until=lambda: len(ran) == 5)
    assert ran == ["thumbnail 3", "charge 7", "charge 8", "thumbnail 1", "thumbnail 2"]


async def test_fair_groups_take_turns(backend: Backend) -> None:
    app = backend.app(concurrency=1)
    ran: list[str] = []

    @app.job(group=lambda tenant, report: tenant)
    async def build_report(tenant: str, report: int) -> None:
        ran.append(f"{tenant}:{report}")

    for report in range(3):
        await build_report.enqueue("big", report)
    await build_report.enqueue("small", 0)
    await backend.run(app, until=lambda: len(ran) == 4)
    assert ran == ["big:0", "small:0", "big:1", "big:2"]


async def test_a_grouped_jobs_priority_does_not_reorder_its_group(backend: Backend) -> None:
    app = backend.app(concurrency=1, priority_aging=None)
    ran: list[str] = []

    @app.job
    async def step(tag: str) -> None:
        ran.append(tag)

    await step.options(group="g").enqueue("first")
    await step.options(group="g", priority=9).enqueue("second")
    await step.options(priority=-5).enqueue("plain low")
    await step.options(priority=5).enqueue("plain high")
    await backend.run(app, until=lambda: len(ran) == 4)
    assert ran == ["first", "plain high", "second", "plain low"]


async def test_a_group_limit_of_one_runs_its_jobs_one_at_a_time_in_order(
        backend: Backend) -> None:
    app = backend.app(concurrency=4, group_limits={"default": 1})
    ran: list[str] = []
    running: set[str] = set()
    overlapped: list[str] = []

    @app.job(group=lambda account, n: account)
    async def post(account: str, n: int) -> None:
        if account in running:
            overlapped.append(f"{account}:{n}")
        running.add(account)
        await anyio.sleep(0.05)
        running.discard(account)
        ran.append(f"{account}:{n}")

    for n in range(3):
        await post.enqueue("a", n)
    await post.enqueue("b", 0)
    await backend.run(app, until=lambda: len(ran) == 4)
    assert overlapped == []
    assert [tag for tag in ran if tag.startswith("a")] == ["a:0", "a:1", "a:2"]


async def test_a_group_that_emptied_joins_the_back_of_the_ring(backend: Backend) -> None:
    app = backend.app(concurrency=1)
    ran: list[str] = []

    @app.job(group=lambda tenant, n: tenant)
    async def work(tenant: str, n: int) -> None:
        ran.append(f"{tenant}:{n}")
        if (tenant, n) == ("a", 0):
            await work.enqueue("a", 1)  # "a" had no job left: it joins behind "b"

    await work.enqueue("a", 0)
    await work.enqueue("b", 0)
    await work.enqueue("b", 1)
    await backend.run(app, until=lambda: len(ran) == 4)
    assert ran == ["a:0", "b:0", "a:1", "b:1"]


async def test_enqueue_many_keeps_its_order_within_a_priority(backend: Backend) -> None:
    app = backend.app(concurrency=1, priority_aging=None)
    ran: list[int] = []

    @app.job
    async def work(n: int) -> None:
        ran.append(n)

    await work.options(priority=1).enqueue_many([((n,), {}) for n in range(3)])
    await work.enqueue_many([((n,), {}) for n in range(10, 13)])
    await backend.run(app, until=lambda: len(ran) == 6)
    assert ran == [0, 1, 2, 10, 11, 12]


async def test_jobs_without_a_group_join_the_ring_when_a_fetch_finds_them(
        backend: Backend) -> None:
    """Found by the fake's run of the fetch-order model: the jobs without a group join
    the ring at a fetch, behind the groups already in it, not at their push."""
    app = backend.app(concurrency=1)
    ran: list[str] = []

    @app.job
    async def work(tag: str) -> None:
        ran.append(tag)

    await work.enqueue("plain 1")
    await work.enqueue("plain 2")
    await work.options(group="a").enqueue("a 1")
    await work.options(group="a").enqueue("a 2")
    await backend.run(app, until=lambda: len(ran) == 4)
    assert ran == ["a 1", "plain 1", "a 2", "plain 2"]
