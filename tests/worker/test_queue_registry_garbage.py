"""The namespace's set of queue names holding another type (a co-tenant's key). An
enqueue is refused with ``WrongTypeKey`` naming it, nothing pushed (a queue with jobs is
always registered: the dashboard and the unserved relay find queues there); a worker is
not stopped by it — it serves and recovers its own queues whatever the registry holds —
and says in the log which key to delete."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from cogworker_async import App
from cogworker_async.errors import WrongTypeKey
from tests.waiting import wait_until

WAIT = 15.0


@pytest.mark.parametrize("planted", ["string", "list"])
async def test_a_registry_of_another_type_refuses_an_enqueue_and_stops_no_worker(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture, planted: str,
) -> None:
    ran: list[int] = []

    def shop() -> tuple[App, object]:
        app = make_app(track_jobs=True)

        @app.job(name="work", retry=0)
        async def work(n: int) -> None:
            ran.append(n)

        return app, work

    app, work = shop()
    store = app._store()
    jid = await work.enqueue(1)  # type: ignore[attr-defined]  # before the garbage
    await store.client.delete(store.keys.queues)
    if planted == "string":
        await store.client.set(store.keys.queues, "a co-tenant's")
    else:
        await store.client.rpush(store.keys.queues, "a co-tenant's")

    other, other_work = shop()  # a new process: it registers the queue before its push
    with pytest.raises(WrongTypeKey, match="nothing was enqueued") as refused:
        await other_work.enqueue(2)  # type: ignore[attr-defined]
    assert refused.value.key == store.keys.queues
    assert await store.client.llen(store.keys.queue("default")) == 1  # job 1 alone

    with caplog.at_level(logging.ERROR, logger="cogworker_async"):
        async with other.worker():
            await wait_until(lambda: ran == [1], timeout=WAIT)
        assert store.keys.queues in caplog.text
    assert (await app.status(jid)).state == "succeeded"
    assert await store.client.type(store.keys.queues) in (b"string", b"list")  # not ours
