"""Two relays on one table push a row once: the once marker is kept (bounded) after a
row's delete commits, since another relay may hold that row, read before the commit
(SQLite has no row locks), and a relay never pushes a row it read longer ago than the
marker is kept."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from cogworker_async import outbox as outbox_module
from cogworker_async.outbox.relay import OutboxRelay
from cogworker_async.redis.keys import Keys
from tests.outbox import outboxapp
from tests.outbox.test_outbox import app_job, queued


class Paused(OutboxRelay):
    """A relay that has read its rows and is about to push them (a worker process
    descheduled there): it waits for ``go``."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read = anyio.Event()
        self.go = anyio.Event()

    async def _push(self, conn: Any, rows: Any, now: float) -> Any:
        self.read.set()
        await self.go.wait()
        return await super()._push(conn, rows, now)


@pytest.mark.parametrize("databases", ["sqlite"], indirect=True)
@pytest.mark.parametrize("track_jobs", [True, False])
async def test_two_relays_on_sqlite_push_one_row_once(
    redis_url: str, engine: AsyncEngine, namespace: str, databases: tuple[str, str],
    track_jobs: bool,
) -> None:
    """Every worker process runs a relay; the guide says SQLite 'has one writer at a
    time anyway'. Relay B reads the row, then relay A pushes, deletes, commits and drops
    the once marker; B's push of the same jid must still be refused. (Tracked, the
    job's live record refuses it too; untracked, or once the record's keep_status is
    over, the marker was the only guard.)"""
    app = outboxapp.build(redis_url, namespace, databases[0], track_jobs=track_jobs)
    job = app_job(app)
    async with AsyncSession(engine) as session, session.begin():
        jid = await outbox_module.enqueue(session, job.s("once"))
    a = OutboxRelay(app.settings.outbox, app._store(), app.registry.keys())
    b = Paused(app.settings.outbox, app._store(), app.registry.keys())
    async with anyio.create_task_group() as tg:
        tg.start_soon(b.relay_once)
        with anyio.fail_after(10):
            await b.read.wait()
        with anyio.fail_after(10):
            assert await a.relay_once() == 1
        b.go.set()
    try:
        assert [p["jid"] for p in await queued(app, namespace)] == [jid]
    finally:
        await app.close()
        assert app.settings.outbox is not None
        await app.settings.outbox.engine.dispose()


@pytest.mark.parametrize("databases", ["sqlite"], indirect=True)
async def test_a_relay_pushes_no_row_it_read_longer_ago_than_the_marker_is_kept(
    redis_url: str, engine: AsyncEngine, namespace: str, databases: tuple[str, str],
) -> None:
    """The marker of a relayed row is kept ``once_kept`` after its delete: a relay that
    read the row before that delete, and was held up longer than half of it, leaves its
    rows for its next pass (where it finds none) instead of pushing past the marker."""
    app = outboxapp.build(redis_url, namespace, databases[0], track_jobs=False)
    job = app_job(app)
    async with AsyncSession(engine) as session, session.begin():
        jid = await outbox_module.enqueue(session, job.s("once"))
    a = OutboxRelay(app.settings.outbox, app._store(), app.registry.keys())
    b = Paused(app.settings.outbox, app._store(), app.registry.keys())
    async with anyio.create_task_group() as tg:
        tg.start_soon(b.relay_once)
        with anyio.fail_after(10):
            await b.read.wait()
        with anyio.fail_after(10):
            assert await a.relay_once() == 1
        await app._store().client.delete(Keys(namespace).once("default", str(jid)))  # expired
        b._read_at -= b.once_kept  # held up since its read
        b.go.set()
    try:
        assert [p["jid"] for p in await queued(app, namespace)] == [jid]
        assert b.relayed == 0
    finally:
        await app.close()
        assert app.settings.outbox is not None
        await app.settings.outbox.engine.dispose()
