"""The transactional outbox on real databases — SQLite and a private PostgreSQL server
(started by the tests where the binaries are; skipped, saying so, where not) — and a
real Redis: a rolled-back transaction enqueues nothing, a committed one exactly one job;
a relay that died between a push and its delete pushes nothing twice; the relay runs in
workers (``App(outbox=...)``) and alone (``cogworker-async outbox-relay``), SIGKILLed
over and over while it relays 1,000 rows: every job ran exactly once."""

from __future__ import annotations

import json
import random
import signal
from collections import Counter
from typing import Any

import anyio
import pytest
from sqlalchemy import MetaData, create_engine, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from cogworker_async import App
from cogworker_async import outbox as outbox_module
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.outbox import Outbox, outbox_table
from cogworker_async.outbox.relay import OutboxRelay
from cogworker_async.redis.keys import Keys
from tests.outbox import outboxapp
from tests.waiting import wait_until
from tests.workerproc import WorkerProcess

WAIT = 30.0
ROWS = 1000
RELAY_TARGET = "tests.outbox.outboxapp:jobs"


async def rows(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(
            select(func.count()).select_from(outbox_module.DEFAULT_TABLE))).scalar_one())


async def queued(app: App, namespace: str) -> list[dict[str, Any]]:
    client = app._store().client
    raws = await client.lrange(Keys(namespace).queue("default"), 0, -1)
    return [json.loads(raw) for raw in raws]


def app_job(app: App) -> Any:
    """The app's ``note`` job, to make signatures of (``note.s(tag)``)."""
    return JobFunction(app._client, app.registry["note"])


async def test_a_rolled_back_transaction_enqueues_nothing_and_a_committed_one_one_job(
    app: App, engine: AsyncEngine, namespace: str,
) -> None:
    job = app_job(app)
    relay = OutboxRelay(app.settings.outbox, app._store())
    async with AsyncSession(engine) as session:
        async with session.begin():
            await outbox_module.enqueue(session, job.s("rolled back"))
            await session.rollback()
    async with AsyncSession(engine) as session, session.begin():
        jid = await outbox_module.enqueue(session, job.s("committed"))

    assert await relay.relay_once() == 1
    assert await relay.relay_once() == 0
    [payload] = await queued(app, namespace)
    assert (payload["jid"], payload["args"]) == (jid, ["committed"])
    assert await rows(engine) == 0
    assert (await relay.measure()).rows == 0


async def test_a_sync_session_writes_in_its_transaction_too(
    app: App, engine: AsyncEngine, databases: tuple[str, str], namespace: str,
) -> None:
    from sqlalchemy.orm import Session

    job = app_job(app)
    sync_engine = create_engine(databases[1])
    try:
        with Session(sync_engine) as session, session.begin():
            jid = outbox_module.enqueue_sync(session, job.s("sync"))
        with Session(sync_engine) as session:
            session.begin()
            outbox_module.enqueue_sync(session, job.s("never"))
            session.rollback()
    finally:
        sync_engine.dispose()
    relay = OutboxRelay(app.settings.outbox, app._store())

    assert await relay.relay_once() == 1
    assert [p["jid"] for p in await queued(app, namespace)] == [jid]


async def test_a_relay_that_died_between_push_and_delete_pushes_nothing_twice(
    app: App, engine: AsyncEngine, namespace: str,
) -> None:
    job = app_job(app)
    async with AsyncSession(engine) as session, session.begin():
        jid = await outbox_module.enqueue(session, job.s("once"))
    async with engine.connect() as conn:
        [(raw,)] = (await conn.execute(select(outbox_module.DEFAULT_TABLE.c.job))).all()
    # the dead pass: its push went through, its delete never committed
    assert await app._store().enqueue("default", [bytes(raw)], jids=[jid], chosen="once") > 0
    relay = OutboxRelay(app.settings.outbox, app._store())

    assert await relay.relay_once() == 1  # taken again, refused as a duplicate, deleted
    assert [p["jid"] for p in await queued(app, namespace)] == [jid]
    assert await rows(engine) == 0


async def test_workers_relay_and_run_the_jobs(app: App, engine: AsyncEngine,
                                              namespace: str) -> None:
    job = app_job(app)
    async with AsyncSession(engine) as session, session.begin():
        for n in range(30):
            await outbox_module.enqueue(session, job.s(f"t{n}"))
    client = app._store().client
    async with app.worker():
        await wait_until(lambda: _ran_count(client, namespace, 30), timeout=WAIT)
    ran = Counter(t.decode() for t in await client.lrange(outboxapp.ran_key(namespace), 0, -1))
    assert ran == Counter(f"t{n}" for n in range(30))
    assert await rows(engine) == 0


async def _ran_count(client: Any, namespace: str, wanted: int) -> bool:
    return int(await client.llen(outboxapp.ran_key(namespace))) == wanted


async def test_what_is_not_an_outbox_job_is_refused_at_the_call(
    app: App, engine: AsyncEngine,
) -> None:
    job = app_job(app)
    async with AsyncSession(engine) as session, session.begin():
        with pytest.raises(TypeError, match="takes a signature"):
            await outbox_module.enqueue(session, "note")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="cannot wait in an outbox"):
            await outbox_module.enqueue(session, job.options(jid="chosen-1").s("x"))
        with pytest.raises(TypeError, match="note"):
            await outbox_module.enqueue(session, job.s())  # missing its argument
    assert await rows(engine) == 0
    with pytest.raises(TypeError, match="async engine"):
        Outbox(create_engine("sqlite://"))  # type: ignore[arg-type]


def test_the_table_goes_on_the_applications_metadata() -> None:
    metadata = MetaData()
    table = outbox_table(metadata, name="jobs_outbox")
    assert metadata.tables["jobs_outbox"] is table
    assert {c.name for c in table.columns} == {"id", "jid", "queue", "job", "created_at",
                                               "namespace", "name", "attempts", "retry_at",
                                               "error"}


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_relay_sigkilled_over_and_over_relays_each_row_exactly_once(
    app: App, engine: AsyncEngine, databases: tuple[str, str], redis_url: str,
    namespace: str,
) -> None:
    job = app_job(app)
    for start in range(0, ROWS, 100):
        async with AsyncSession(engine) as session, session.begin():
            for n in range(start, start + 100):
                await outbox_module.enqueue(session, job.s(f"r{n}"))
    kills = 0
    replayed = 0  # rows found again after a kill whose jid was pushed already
    rng = random.Random(30)
    while left := await rows(engine):
        relay = _start_relay(redis_url, namespace, databases[0])

        async def relaying(before: int = left, relay: WorkerProcess = relay) -> bool:
            return await rows(engine) < before or not relay.alive()  # pushing (or dead)
        await wait_until(relaying, timeout=WAIT, every=0.02)
        await anyio.sleep(rng.uniform(0.0, 0.3))  # mid-pass, most often
        relay.signal(signal.SIGKILL)
        await relay.wait_exit(timeout=10)
        kills += 1
        replayed += await _pushed_and_left(app, engine, namespace)
        assert kills < 200, "the relay never finished"
    client = app._store().client
    async with app.worker():
        await wait_until(lambda: _ran_count(client, namespace, ROWS), timeout=60)
        await anyio.sleep(0.5)  # nothing more arrives
    ran = Counter(t.decode() for t in await client.lrange(outboxapp.ran_key(namespace), 0, -1))
    print(f"OUTBOX relay-kills rows={ROWS} kills={kills} replayed={replayed}")
    assert ran == Counter(f"r{n}" for n in range(ROWS))  # each exactly once
    assert kills >= 2


def _start_relay(redis_url: str, namespace: str, db: str) -> WorkerProcess:
    """``cogworker-async outbox-relay`` (the relay alone) on the test's database."""
    relay = WorkerProcess(redis_url, namespace, {}, [], target=RELAY_TARGET,
                          env={outboxapp.DB_ENV: db})
    return relay.start(command="outbox-relay")


async def _pushed_and_left(app: App, engine: AsyncEngine, namespace: str) -> int:
    """Rows still in the outbox whose jid is on the queue already: the window between a
    push and its delete, which the next relay must close without a second job."""
    async with engine.connect() as conn:
        jids = [row.jid for row in (await conn.execute(
            select(outbox_module.DEFAULT_TABLE.c.jid))).all()]
    if not jids:
        return 0
    on_queue = {p["jid"] for p in await queued(app, namespace)}
    return len(set(jids) & on_queue)


async def test_a_row_redis_refuses_holds_up_no_other(
    app: App, engine: AsyncEngine, namespace: str,
) -> None:
    """A row whose push keeps failing (here its queue's list holds another type) stays,
    marked, for a later pass; the rows after it are relayed all the same (a full batch
    of such rows: ``test_outbox_owners.py``)."""
    job = app_job(app)
    client = app._store().client
    await client.hset(Keys(namespace).queue("broken"), "planted", "by a test")
    async with AsyncSession(engine) as session, session.begin():
        stuck = await outbox_module.enqueue(session, job.options(queue="broken").s("stuck"))
        fine = await outbox_module.enqueue(session, job.s("fine"))
    relay = OutboxRelay(app.settings.outbox, app._store())

    assert await relay.relay_once() == 1
    assert [p["jid"] for p in await queued(app, namespace)] == [fine]
    async with engine.connect() as conn:
        left = [r.jid for r in (await conn.execute(
            select(outbox_module.DEFAULT_TABLE.c.jid))).all()]
    assert left == [stuck]
    await client.delete(Keys(namespace).queue("broken"))  # mended: it goes once its
    async with engine.begin() as conn:  # wait after the refusal (1 s) is up
        await conn.execute(update(outbox_module.DEFAULT_TABLE).values(retry_at=0.0))
    assert await relay.relay_once() == 1
    assert await rows(engine) == 0
