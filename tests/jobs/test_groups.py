"""Fair groups end to end: a real worker on a real Redis (single and a 3-master cluster)
serves a queue's groups in turn, so a group of 1 job beside one of 10,000 starts within
one round; ``group_limits`` caps what runs of one group across the fleet and, at 1, keeps
each group's jobs one at a time in order; the admin sees jobs waiting and running per
group; bad groups are refused at the call; the testing fake takes the same turns."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import App, ConfigurationError
from cogworker_async.admin import Inspector
from tests.conftest import url_of_topology
from tests.waiting import wait_until

WAIT = 30.0

redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)


async def test_a_group_of_one_job_starts_within_one_round_beside_one_of_10000(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=False, concurrency=1)
    ran: list[str] = []

    @app.job(name="tenant_job", retry=0)
    async def tenant_job(tenant: str) -> None:
        ran.append(tenant)

    for _start in range(0, 10_000, 1000):
        await tenant_job.options(group="big").enqueue_many([(("big",), {})] * 1000)
    await tenant_job.options(group="small").enqueue("small")

    async with app.worker():
        await wait_until(lambda: "small" in ran, timeout=WAIT)

    assert ran.index("small") <= 1, ran[:5]  # big's first, then small's turn


def tenant_jobs(app: App) -> tuple[Any, Any, list[str]]:
    """``tagged(tenant, n)`` in the tenant's group, ``plain(n)`` in none; both note
    ``<tenant><n>`` (``p<n>``) as they run."""
    ran: list[str] = []

    @app.job(name="tagged", group=lambda tenant, n: tenant)
    async def tagged(tenant: str, n: int) -> None:
        ran.append(f"{tenant}{n}")

    @app.job(name="plain")
    async def plain(n: int) -> None:
        ran.append(f"p{n}")

    return tagged, plain, ran


async def test_groups_take_turns_and_the_jobs_without_a_group_take_one_together(
    make_app: Callable[..., App],
) -> None:
    app = make_app(concurrency=1)
    tagged, plain, ran = tenant_jobs(app)
    for n in range(3):
        await tagged.enqueue("a", n)
    await tagged.enqueue("b", 0)
    for n in range(2):
        await plain.enqueue(n)
    async with app.worker():
        await wait_until(lambda: len(ran) == 6, timeout=WAIT)

    assert ran == ["a0", "b0", "p0", "a1", "p1", "a2"]


async def test_a_group_limit_of_1_runs_each_groups_jobs_one_at_a_time_in_order(
    make_app: Callable[..., App],
) -> None:
    app = make_app(concurrency=6, group_limits={"default": 1})
    spans: list[tuple[str, int, float, float]] = []

    @app.job(name="step", group=lambda tenant, n: tenant)
    async def step(tenant: str, n: int) -> None:
        began = time.monotonic()
        await anyio.sleep(0.02)
        spans.append((tenant, n, began, time.monotonic()))

    for n in range(5):
        for tenant in ("a", "b", "c"):
            await step.enqueue(tenant, n)
    async with app.worker():
        await wait_until(lambda: len(spans) == 15, timeout=WAIT)

    for tenant in ("a", "b", "c"):
        mine = sorted((s for s in spans if s[0] == tenant), key=lambda s: s[2])
        assert [n for _, n, _, _ in mine] == list(range(5))  # in enqueue order
        for before, after in itertools.pairwise(mine):
            assert before[3] <= after[2], f"{tenant}: two at once"
    # the three groups ran side by side: the limit is per group, not per queue
    assert max(sum(1 for s in spans if s[2] <= at < s[3]) for _, _, at, _ in spans) >= 2


async def test_the_admin_sees_jobs_waiting_and_running_per_group(
    make_app: Callable[..., App],
) -> None:
    app = make_app(concurrency=2)
    gate = anyio.Event()

    @app.job(name="hold")
    async def hold(n: int) -> None:
        await gate.wait()

    await hold.options(group="acme").enqueue_many([((n,), {}) for n in range(3)])
    await hold.options(group="zeta").enqueue(9)
    await hold.enqueue(0)
    insp = Inspector(app)
    [info] = await insp.queues.infos(["default"])
    assert (info.size, dict(info.by_group), dict(info.by_priority)) == (
        5, {"acme": 3, "zeta": 1}, {0: 1})
    page = await insp.queue("default").page(1, 10)
    assert [r.args[0] for r in page.items] == [0, 0, 1, 2, 9]

    async with app.worker():
        await wait_until(lambda: _running(insp, {"acme": 1, "zeta": 1}), timeout=WAIT)
        assert (await insp.queue("default").clear()) == 3
        gate.set()
    [info] = await insp.queues.infos(["default"])
    assert (info.size, dict(info.by_group)) == (0, {})


async def _running(insp: Inspector, expected: dict[str, int]) -> bool:
    return await insp.queue("default").groups_running() == expected


@pytest.mark.parametrize(("value", "error"), [
    ("", ValueError), ("a" * 201, ValueError), ('say "hi"', ValueError),
    ("tab\there", ValueError), (7, TypeError)])
def test_a_bad_group_is_refused_at_the_call(
    make_app: Callable[..., App], value: Any, error: type[Exception]
) -> None:
    app = make_app()

    @app.job(name="fine")
    async def fine() -> None: ...

    with pytest.raises(error, match="group"):
        fine.options(group=value)


async def test_a_group_function_that_names_no_group_well_fails_the_enqueue(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.job(name="keyed", group=lambda n: n)
    async def keyed(n: Any) -> None: ...

    with pytest.raises(TypeError, match="keyed: group"):
        await keyed.enqueue(5)
    assert await keyed.enqueue(None) is not None  # None: no group
    with pytest.raises(TypeError, match="group must be a str or a function"):
        app.job(name="odd", group=5)(lambda: None)


async def test_groups_need_reliable_fetch(make_app: Callable[..., App]) -> None:
    app = make_app(fetch="basic")

    @app.job(name="fine")
    async def fine() -> None: ...

    with pytest.raises(ConfigurationError, match="reliable fetch"):
        await fine.options(group="acme").enqueue()
    with pytest.raises(ValueError, match="group_limits needs reliable fetch"):
        make_app(fetch="basic", group_limits={"default": 1})


async def test_the_testing_fake_takes_the_same_turns(make_app: Callable[..., App]) -> None:
    app = make_app()
    tagged, plain, ran = tenant_jobs(app)
    async with app.testing.fake():
        for n in range(3):
            await tagged.enqueue("a", n)
        await tagged.enqueue("b", 0)
        for n in range(2):
            await plain.enqueue(n)
        await app.testing.drain()

    assert ran == ["a0", "b0", "p0", "a1", "p1", "a2"]
