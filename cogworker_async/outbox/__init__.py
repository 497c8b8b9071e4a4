"""Transactional enqueue: a job written in the caller's own database transaction, pushed
to Redis by a relay once that transaction has committed — nothing if it rolled back,
exactly one job if it committed.

    async with session.begin():                       # SQLAlchemy, async or sync
        session.add(order)
        await outbox.enqueue(session, send_receipt.s(order.id))

    with transaction.atomic():                        # Django
        order.save()
        outbox.enqueue_django(send_receipt.s(order.id))

A job enqueued before the commit can run on data that is not there (or never will be);
one enqueued after is lost if the process dies in between. Here the job is a row of the
outbox table (``outbox_table()``, in the application's database: create it with its
other tables, ``metadata.create_all`` or a migration), written by the caller's session
in the caller's transaction, and checked at the call as any enqueue is (its arguments,
JSON, size; through the client middleware). Each row carries its jid.

The relay (``outbox/relay.py``: inside workers with ``App(outbox=Outbox(engine))``,
or alone, ``cogworker-async outbox-relay app:jobs``) pushes rows to Redis and deletes
them. The push refuses a jid that was ever enqueued (the ``once`` marker of
``lua/enqueue.lua``), so a relay that dies between a push and the row's delete pushes the
same jid again next time, is refused, and deletes the row: each row becomes exactly one
job. Several relays may run: each takes rows ``FOR UPDATE SKIP LOCKED`` where the
database has it (PostgreSQL, MySQL 8); on SQLite (no row locks) two may read one row,
and the second push is refused by the once marker, kept a while after the delete.

Each row carries its App's namespace and its job's name: a relay takes only the rows
of its own namespace that name a job its App registers, so that Apps sharing a database
never relay each other's jobs (a row of its namespace naming a job it does not know is
left for a relay that does, and said in its log). A row Redis refuses waits, marked
(``attempts``, ``error``, ``retry_at``), while the relay goes past it.

Needs the ``outbox`` extra (SQLAlchemy 2). Jobs that are decided as they are pushed —
unique, ``after=``, dedup modes, a chosen jid — cannot wait in an outbox (a ValueError),
nor can a job enqueued inside a batch block: it would join the batch at the relay's
push, after the block (and maybe the batch) has ended, or never if the transaction
rolls back; outbox a job that opens the batch instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    inspect,
)
from sqlalchemy import insert as sql_insert
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.schema import CreateColumn

from cogworker_async.jobs import context
from cogworker_async.jobs.signature import Signature

TABLE_NAME: Final = "cogworker_outbox"
RELAY_BATCH: Final = 100
"""Rows one relay pass takes (and holds locked while it pushes them)."""
RELAY_INTERVAL: Final = 0.2
"""Seconds a relay waits after a pass that found fewer rows than a batch."""


ADDED_COLUMNS: Final = ("namespace", "name", "attempts", "retry_at", "error")
"""Columns a table made by the first version lacks (``upgrade`` adds them): all nullable,
so that rows written before stay valid (NULL namespace and name: taken by any relay
whose App registers the job)."""
MAX_ERROR: Final = 1000
"""Characters of a refusal kept in a row's ``error``."""


def outbox_table(metadata: MetaData | None = None, name: str = TABLE_NAME) -> Table:
    """The outbox table, on ``metadata`` (your models' own, so that ``create_all`` and
    Alembic's autogenerate see it): id, jid (unique), queue, job (the raw job, as it
    will be pushed), created_at (epoch s: the relay's lag), namespace (the App's: only
    its relays take the row), name (the job's), and for a row Redis refused: attempts,
    error (what Redis said last) and retry_at (epoch s: not taken before)."""
    return Table(
        name, metadata if metadata is not None else MetaData(),
        Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
               autoincrement=True),
        Column("jid", String(64), nullable=False, unique=True),
        Column("queue", String(255), nullable=False),
        Column("job", LargeBinary, nullable=False),
        Column("created_at", Float, nullable=False),
        Column("namespace", String(255), nullable=True),
        Column("name", String(255), nullable=True),
        Column("attempts", Integer, nullable=True),
        Column("retry_at", Float, nullable=True),
        Column("error", String(MAX_ERROR), nullable=True),
    )


DEFAULT_TABLE: Final = outbox_table()
"""The table ``enqueue`` writes unless given another (``cogworker_outbox``)."""


@dataclass(frozen=True, slots=True)
class Outbox:
    """Where the relay reads: ``App(outbox=Outbox(engine))`` relays inside each worker
    process, ``cogworker-async outbox-relay`` alone. The engine is an async one
    (``create_async_engine``: ``postgresql+asyncpg``, ``sqlite+aiosqlite``, ...)."""

    engine: AsyncEngine
    table: Table = DEFAULT_TABLE
    batch: int = RELAY_BATCH
    interval: float = RELAY_INTERVAL

    def __post_init__(self) -> None:
        if not isinstance(self.engine, AsyncEngine):
            raise TypeError("Outbox takes an async engine (sqlalchemy.ext.asyncio."
                            f"create_async_engine), not {type(self.engine).__name__}")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) \
                or not 0 < self.batch <= 10_000:
            raise ValueError(f"batch must be an int from 1 to 10,000, got {self.batch!r}")


async def upgrade(engine: AsyncEngine, table: Table = DEFAULT_TABLE) -> list[str]:
    """Add to ``table`` the columns an earlier version's lacks (``ADDED_COLUMNS``); the
    names added (none: up to date, or no such table). The relay runs it before its first
    pass; run it yourself (or the same ``ALTER TABLE ... ADD COLUMN``, all nullable, in a
    migration) before writers of this version insert rows."""
    async with engine.begin() as conn:
        added: list[str] = await conn.run_sync(upgrade_sync, table)
        return added


def upgrade_sync(connection: Any, table: Table = DEFAULT_TABLE) -> list[str]:
    """``upgrade`` on a sync ``Connection``, in its transaction."""
    found = inspect(connection)
    if not found.has_table(table.name, schema=table.schema):
        return []
    have = {column["name"] for column in found.get_columns(table.name, schema=table.schema)}
    added = [name for name in ADDED_COLUMNS if name not in have]
    where = connection.dialect.identifier_preparer.format_table(table)
    for name in added:
        column = CreateColumn(table.c[name]).compile(dialect=connection.dialect)
        connection.exec_driver_sql(f"ALTER TABLE {where} ADD COLUMN {column}")
    return added


def _row(push: Any, signature: Signature) -> dict[str, Any]:
    return {"jid": push.jid, "queue": push.queue, "job": push.raw, "created_at": time.time(),
            "namespace": signature.enqueuer.namespace, "name": signature.name}


def _checked(signature: object) -> Signature:
    if not isinstance(signature, Signature):
        raise TypeError(f"outbox.enqueue takes a signature (job.s(*args, **kwargs)), not "
                        f"{type(signature).__name__}")
    if signature.incomplete is not None:
        raise TypeError(f"{signature.name}: {signature.incomplete}")
    if context.BATCH.get() is not None:
        # Joined now, a row that rolls back holds the batch open for good; joined at the
        # relay's push, the batch has ended before it (its callbacks ran without it).
        raise ValueError(f"{signature.name}: a job written to the outbox cannot join the "
                         "batch whose block this is (the batch would end before the relay "
                         "pushes it, or never if the transaction rolls back): outbox a job "
                         "that opens the batch, or enqueue the batch after the commit")
    return signature


async def enqueue(session: Any, signature: Signature, *, table: Table = DEFAULT_TABLE
                  ) -> str | None:
    """Write ``signature``'s job as a row of the outbox, through ``session`` (an
    ``AsyncSession`` or ``AsyncConnection``), in its transaction: pushed by the relay
    once it commits, never if it rolls back. Returns its jid (None: a client middleware
    refused the job)."""
    push = await _checked(signature).prepared()
    if push is None:
        return None
    await session.execute(sql_insert(table).values(**_row(push, signature)))
    return str(push.jid)


def enqueue_sync(session: Any, signature: Signature, *, table: Table = DEFAULT_TABLE
                 ) -> str | None:
    """``enqueue`` through a sync ``Session`` or ``Connection``."""
    push = _checked(signature).prepared_sync()
    if push is None:
        return None
    session.execute(sql_insert(table).values(**_row(push, signature)))
    return str(push.jid)


DJANGO_DIALECTS: Final = {"postgresql": "postgresql", "sqlite": "sqlite", "mysql": "mysql",
                          "oracle": "oracle"}
"""Django's database vendor -> the SQLAlchemy dialect that writes its SQL."""


def enqueue_django(signature: Signature, *, using: str = "default",
                   table: Table = DEFAULT_TABLE) -> str | None:
    """``enqueue`` through Django's connection ``using``, in its transaction (inside
    ``transaction.atomic()``: pushed by the relay once it commits, never if it rolls
    back). The statement is SQLAlchemy's, written for the connection's database and run
    on Django's own cursor, so it is part of whatever Django has open."""
    from django.db import connections  # type: ignore[import-untyped]  # Django: only here
    from sqlalchemy.dialects import registry

    push = _checked(signature).prepared_sync()
    if push is None:
        return None
    connection = connections[using]
    vendor = DJANGO_DIALECTS.get(connection.vendor)
    if vendor is None:
        raise ValueError(f"the outbox does not know Django's {connection.vendor!r} database")
    # Django's cursors take %s placeholders whatever the database: the "format" style.
    dialect = registry.load(vendor)(paramstyle="format")
    compiled = sql_insert(table).values(**_row(push, signature)).compile(dialect=dialect)
    order = compiled.positiontup or []
    with connection.cursor() as cursor:
        cursor.execute(str(compiled), [compiled.params[name] for name in order])
    return str(push.jid)
