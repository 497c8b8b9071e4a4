"""Whose rows a relay takes, and what a row leaves behind (issue 40: defects 7, 10, 16,
20), on SQLite and a private PostgreSQL, with a real Redis:

- rows Redis refuses — a full batch of them, and more — hold up no other row: each is
  marked (attempts, error, retry_at) and logged, and the passes read past it;
- two Apps sharing one database each relay their own rows only; a row of an App's
  namespace naming a job it does not register is left (and said), not pushed; rows
  written before the table had those columns are relayed after the relay adds them;
- a job outboxed inside a batch block is refused at the call;
- a relayed job leaves no once marker: what it leaves is its record, bounded by its
  ``keep_status``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import Column, Float, Integer, LargeBinary, MetaData, String, Table, select
from sqlalchemy import insert as sql_insert
from sqlalchemy import update as sql_update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from cogworker_async import App
from cogworker_async import outbox as outbox_module
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.outbox import Outbox, outbox_table
from cogworker_async.outbox.relay import OutboxRelay
from cogworker_async.redis.keys import Keys
from tests.outbox import outboxapp
from tests.outbox.test_outbox import app_job, queued, rows

TABLE = outbox_module.DEFAULT_TABLE


async def jids_left(engine: AsyncEngine, table: Table = TABLE) -> list[str]:
    async with engine.connect() as conn:
        return [r.jid for r in (await conn.execute(select(table.c.jid)
                                                   .order_by(table.c.id))).all()]


async def test_a_full_batch_of_rows_redis_refuses_holds_up_no_other(
    app: App, engine: AsyncEngine, namespace: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """45 rows Redis refuses (their queue's list holds a hash), more than two passes'
    batches (20), written before 5 good ones: the good ones go on the first passes; the
    refused are marked and said, and go once the queue is mended and their wait is up."""
    job = app_job(app)
    client = app._store().client
    await client.hset(Keys(namespace).queue("broken"), "planted", "by a test")
    async with AsyncSession(engine) as session, session.begin():
        stuck = [await outbox_module.enqueue(session, job.options(queue="broken").s(f"s{n}"))
                 for n in range(45)]
        fine = [await outbox_module.enqueue(session, job.s(f"f{n}")) for n in range(5)]
    relay = OutboxRelay(app.settings.outbox, app._store(), app.registry.keys())

    caplog.set_level(logging.WARNING, "cogworker_async.outbox.relay")
    for _ in range(4):  # 3 passes read every refused row once; the 4th finds nothing due
        await relay.relay_once()
    assert sorted(p["jid"] for p in await queued(app, namespace)) == sorted(fine)
    assert await jids_left(engine) == stuck
    async with engine.connect() as conn:
        marks = (await conn.execute(select(TABLE.c.attempts, TABLE.c.error,
                                           TABLE.c.retry_at))).all()
    assert {m.attempts for m in marks} == {1}
    assert all("WRONGTYPE" in m.error and m.retry_at > 0 for m in marks)
    said = [r.getMessage() for r in caplog.records if "Redis refused" in r.getMessage()]
    assert len(said) == 45
    assert "broken" in said[0]
    backlog = await relay.measure()
    assert (backlog.rows, backlog.refused) == (45, 45)

    await client.delete(Keys(namespace).queue("broken"))  # mended; their wait is up:
    async with engine.begin() as conn:
        await conn.execute(sql_update(TABLE).values(retry_at=0.0))
    while await relay.relay_once():
        pass
    assert await rows(engine) == 0
    broken = await app._store().client.lrange(Keys(namespace).queue("broken"), 0, -1)
    assert len(broken) == 45


@pytest.fixture
async def other_app(redis_url: str, namespace: str, databases: tuple[str, str]
                    ) -> AsyncIterator[App]:
    """Another App on the same database and the same Redis, namespace ``<ns>-b``."""
    built = outboxapp.build(redis_url, f"{namespace}-b", databases[0])
    yield built
    await built.close()
    assert built.settings.outbox is not None
    await built.settings.outbox.engine.dispose()


async def test_two_apps_sharing_a_database_each_relay_their_own_rows(
    app: App, other_app: App, engine: AsyncEngine, namespace: str,
) -> None:
    mine, theirs = app_job(app), app_job(other_app)
    async with AsyncSession(engine) as session, session.begin():
        for n in range(10):
            await outbox_module.enqueue(session, mine.s(f"a{n}"))
            await outbox_module.enqueue(session, theirs.s(f"b{n}"))
    relay_a = OutboxRelay(app.settings.outbox, app._store(), app.registry.keys())
    relay_b = OutboxRelay(other_app.settings.outbox, other_app._store(),
                          other_app.registry.keys())

    assert await relay_a.relay_once() == 10
    assert await relay_a.relay_once() == 0
    assert (await relay_a.measure()).rows == 0
    assert (await relay_b.measure()).rows == 10
    assert await relay_b.relay_once() == 10
    assert Counter(p["args"][0][0] for p in await queued(app, namespace)) == {"a": 10}
    assert Counter(p["args"][0][0] for p in await queued(other_app, f"{namespace}-b")) \
        == {"b": 10}


async def test_a_row_naming_a_job_the_app_does_not_register_is_left_and_said(
    app: App, engine: AsyncEngine, redis_url: str, namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Same namespace, another code base (its job ``elsewhere``): the relay of ``app``
    leaves the row for a relay that knows it, says so, and relays its own."""
    elsewhere_app = App(redis_url, namespace=namespace)

    @elsewhere_app.job(name="elsewhere")
    async def elsewhere() -> None: ...

    try:
        async with AsyncSession(engine) as session, session.begin():
            foreign = await outbox_module.enqueue(session, JobFunction(
                elsewhere_app._client, elsewhere_app.registry["elsewhere"]).s())
            own = await outbox_module.enqueue(session, app_job(app).s("own"))
    finally:
        await elsewhere_app.close()
    relay = OutboxRelay(app.settings.outbox, app._store(), app.registry.keys())
    caplog.set_level(logging.WARNING, "cogworker_async.outbox.relay")

    assert await relay.relay_once() == 1
    assert [p["jid"] for p in await queued(app, namespace)] == [own]
    assert await jids_left(engine) == [foreign]
    backlog = await relay.measure()
    assert (backlog.rows, backlog.unknown) == (0, 1)
    assert any("'elsewhere'" in r.getMessage() and "does not register" in r.getMessage()
               for r in caplog.records)


async def test_rows_of_a_table_made_by_the_first_version_are_relayed_after_an_upgrade(
    app: App, engine: AsyncEngine, namespace: str,
) -> None:
    """The table as the first version made it (no namespace, name, attempts...), with a
    row written then: the relay adds the columns and relays the row; a row naming a job
    this App does not register is left; writers of this version then write there."""
    legacy = Table("legacy_outbox", MetaData(),
                   Column("id", Integer, primary_key=True, autoincrement=True),
                   Column("jid", String(64), nullable=False, unique=True),
                   Column("queue", String(255), nullable=False),
                   Column("job", LargeBinary, nullable=False),
                   Column("created_at", Float, nullable=False))
    async with engine.begin() as conn:
        await conn.run_sync(legacy.metadata.create_all)
    push = await app_job(app).s("old").prepared()
    foreign = push.raw.replace(b'"class":"note"', b'"class":"gone"')
    assert foreign != push.raw
    async with engine.begin() as conn:
        await conn.execute(sql_insert(legacy).values(
            jid=push.jid, queue="default", job=push.raw, created_at=1.0))
        await conn.execute(sql_insert(legacy).values(
            jid="foreign-1", queue="default", job=foreign, created_at=2.0))
    table = outbox_table(name="legacy_outbox")
    relay = OutboxRelay(Outbox(engine, table=table), app._store(), app.registry.keys())

    assert await relay.relay_once() == 1
    assert [p["jid"] for p in await queued(app, namespace)] == [push.jid]
    assert await jids_left(engine, table) == ["foreign-1"]
    assert await outbox_module.upgrade(engine, table) == []  # done once
    async with AsyncSession(engine) as session, session.begin():
        new = await outbox_module.enqueue(session, app_job(app).s("new"), table=table)
    assert await relay.relay_once() == 1
    assert [p["jid"] for p in await queued(app, namespace)] == [new, push.jid]


async def test_a_job_outboxed_inside_a_batch_block_is_refused_at_the_call(
    app: App, engine: AsyncEngine,
) -> None:
    job = app_job(app)
    async with AsyncSession(engine) as session, session.begin():
        async with app.batch(on_complete=job.s("done")):
            with pytest.raises(ValueError, match="cannot join the batch"):
                await outbox_module.enqueue(session, job.s("member"))
    assert await rows(engine) == 0


async def test_a_relayed_job_leaves_no_once_marker_only_its_record(
    app: App, engine: AsyncEngine, namespace: str,
) -> None:
    """The row's delete committed: its marker is kept only a minute or so more (a relay
    that read the row before the commit is refused), not the records' 14 days. A push of
    the jid while its record lives is refused all the same."""
    job = app_job(app)
    async with AsyncSession(engine) as session, session.begin():
        jids = [await outbox_module.enqueue(session, job.s(f"m{n}")) for n in range(5)]
    relay = OutboxRelay(app.settings.outbox, app._store(), app.registry.keys())
    assert relay.once_kept == max(60.0, 10 * relay.outbox.interval)
    assert relay.once_kept <= 600  # the default interval's: minutes, not days
    assert await relay.relay_once() == 5

    client = app._store().client
    keys = Keys(namespace)
    for jid in jids:
        assert 0 < await client.ttl(keys.once("default", str(jid))) <= relay.once_kept
    [raw] = await client.lrange(keys.queue("default"), -1, -1)
    assert await app._store().enqueue("default", [raw], jids=[jids[0]], chosen="once") < 0
