"""The namespace's set of queue names holding another type (a co-tenant's key): it is
the dashboard's and the unserved relay's index, never a condition of a push or of a
start — an enqueue pushes its job, a worker starts and runs it, and the log names the key
to delete (a co-tenant's garbage is skipped with a log line, never blocks the rest)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from cogworker_async import App
from tests.waiting import wait_until

WAIT = 15.0


@pytest.mark.parametrize("planted", ["string", "list"])
async def test_a_registry_of_another_type_blocks_no_enqueue_and_no_worker(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture, planted: str,
) -> None:
    app = make_app(track_jobs=True)
    ran: list[int] = []

    @app.job(name="work", retry=0)
    async def work(n: int) -> None:
        ran.append(n)

    store = app._store()
    if planted == "string":
        await store.client.set(store.keys.queues, "a co-tenant's")
    else:
        await store.client.rpush(store.keys.queues, "a co-tenant's")
    with caplog.at_level(logging.ERROR, logger="cogworker_async"):
        jid = await work.enqueue(1)
        assert jid is not None
        assert store.keys.queues in caplog.text
        assert "another type" in caplog.text
        async with app.worker():
            await wait_until(lambda: ran == [1], timeout=WAIT)
    assert (await app.status(jid)).state == "succeeded"
    assert await store.client.type(store.keys.queues) in (b"string", b"list")  # not ours
