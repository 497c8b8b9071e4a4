"""The outbox tests' databases (SQLite, and a private PostgreSQL server where the
binaries are: skipped, saying so, where not) and their App."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from cogworker_async import App
from cogworker_async import outbox as outbox_module
from tests import postgres
from tests.outbox import outboxapp


@pytest.fixture(scope="module")
def postgres_path() -> Iterator[str]:
    reason = postgres.why_not()
    if reason is not None:
        pytest.skip(reason)
    with postgres.private_postgres() as path:
        yield path


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(async URL, sync URL) of one empty database."""
    if request.param == "sqlite":
        file = tmp_path / "app.sqlite"
        return f"sqlite+aiosqlite:///{file}", f"sqlite:///{file}"
    path = request.getfixturevalue("postgres_path")
    name = f"t{abs(hash(request.node.nodeid)) % 10**9}"
    admin = create_engine(f"postgresql+psycopg://{path}", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    base = path.rsplit("/", 1)[0]
    return f"postgresql+asyncpg://{base}/{name}", f"postgresql+psycopg://{base}/{name}"


@pytest.fixture
async def engine(databases: tuple[str, str]) -> AsyncIterator[AsyncEngine]:
    created = create_async_engine(databases[0])
    async with created.begin() as conn:
        await conn.run_sync(outbox_module.DEFAULT_TABLE.metadata.create_all)
    yield created
    await created.dispose()


@pytest.fixture
async def app(redis_url: str, namespace: str, engine: AsyncEngine,
              databases: tuple[str, str]) -> AsyncIterator[App]:
    built = outboxapp.build(redis_url, namespace, databases[0])
    yield built
    await built.close()
    assert built.settings.outbox is not None
    await built.settings.outbox.engine.dispose()  # the application's: it closes it
