"""``jobs.worker(group_limits=...)`` over the limits the App's jobs declared
(``@jobs.job(group=Group(..., limit=n))``): merged, never replacing them; a different
value for a declared queue refused, naming the queue and both values. And
``App.store()``, internal since issue 42, kept as an alias that warns."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import anyio
import pytest

from cogworker_async import App, Group
from cogworker_async import app as app_module
from tests.waiting import wait_until


async def test_an_override_keeps_the_limits_the_jobs_declared(
    make_app: Callable[..., App],
) -> None:
    app = make_app(queues=["default", "bulk"], concurrency=4)
    active: list[str] = []
    finished: list[str] = []
    most = [0]

    @app.job(group=Group(lambda tenant: tenant, limit=1))
    async def sync(tenant: str) -> None:
        active.append(tenant)
        most[0] = max(most[0], len(active))
        await anyio.sleep(0.05)  # room for a second one of the group to start beside it
        active.remove(tenant)
        finished.append(tenant)

    for _ in range(3):
        await sync.enqueue("acme")
    async with app.worker(group_limits={"bulk": 2}) as worker:
        assert worker.settings.group_limits == {"default": 1, "bulk": 2}
        await wait_until(lambda: len(finished) == 3, timeout=10)
    assert most[0] == 1  # the declared limit held: never two of "acme" at once


async def test_an_override_of_the_same_value_is_accepted(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.job(group=Group("all", limit=2))
    async def work() -> None: ...

    async with app.worker(group_limits={"default": 2}) as worker:
        assert worker.settings.group_limits == {"default": 2}


async def test_a_conflicting_override_names_the_queue_and_both_values(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.job(group=Group("all", limit=2))
    async def work() -> None: ...

    with pytest.raises(ValueError, match=r"queue 'default'.* 5.* 2 already"):
        async with app.worker(group_limits={"default": 5}):
            pytest.fail("a worker started with the declared limit dropped")
    assert app.settings.group_limits == {"default": 2}  # the App's own is unchanged


async def test_app_store_is_an_alias_that_warns_once(
    make_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app_module, "_store_warned", False)
    app = make_app()
    with pytest.warns(DeprecationWarning, match=r"App.store\(\) is internal; use"):
        store = app.store()
    assert await store.pause("default") is True  # the Store itself, on Redis
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert app.store() is app._store()  # warned once: silent now
    assert "default" in await app.paused()
