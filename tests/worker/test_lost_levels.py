"""A queue's set of priority levels lost while its level lists hold jobs (evicted under an
``allkeys-*`` policy, deleted by a hand): the fetch reads only the levels the set names,
so the worker's poller names them again and the jobs run — they never wait forever."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cogworker_async import App
from cogworker_async.worker import poller
from tests.waiting import wait_until

WAIT = 15.0


async def test_jobs_on_a_level_its_set_lost_still_run(
    make_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(poller, "LEVELS_EVERY", 0.2)
    app = make_app(track_jobs=True)
    ran: list[str] = []

    @app.job(name="work", retry=0)
    async def work(tag: str) -> None:
        ran.append(tag)

    await work.options(priority=5).enqueue("high")
    await work.options(priority=-3).enqueue("low")
    store = app._store()
    await store.client.delete(store.keys.priority_levels("default"))
    async with app.worker():
        await wait_until(lambda: sorted(ran) == ["high", "low"], timeout=WAIT)
