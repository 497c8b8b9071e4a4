"""The outbox through Django (``outbox.enqueue_django``), on SQLite and on a private
PostgreSQL server (skipped, saying so, where there are no binaries): the row is written
on Django's own connection, inside ``transaction.atomic()`` — nothing if the block rolls
back, one job once it commits and the relay pushed it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import anyio
import pytest
from sqlalchemy import create_engine

from cogworker_async import App
from cogworker_async import outbox as outbox_module
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.outbox.relay import OutboxRelay
from cogworker_async.redis.keys import Keys
from tests import postgres
from tests.outbox import outboxapp

django = pytest.importorskip("django", reason="Django is not installed (the dev extra has it)")


@pytest.fixture(scope="module")
def django_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Django set up once for this module: alias -> (async SQLAlchemy URL) of the same
    database, for the relay."""
    from django.conf import settings

    file = tmp_path_factory.mktemp("django") / "app.sqlite"
    databases: dict[str, Any] = {"default": {"ENGINE": "django.db.backends.sqlite3",
                                             "NAME": str(file)}}
    urls = {"default": f"sqlite+aiosqlite:///{file}"}
    sync = {"default": f"sqlite:///{file}"}
    reason = postgres.why_not()
    with postgres.private_postgres() if reason is None else nullcontext() as path:
        if path is not None:
            user, rest = path.split("@", 1)
            host, port = rest.split("/", 1)[0].split(":")
            databases["pg"] = {"ENGINE": "django.db.backends.postgresql", "NAME": "postgres",
                               "USER": user, "HOST": host, "PORT": port}
            urls["pg"] = f"postgresql+asyncpg://{path}"
            sync["pg"] = f"postgresql+psycopg://{path}"
        if not settings.configured:
            settings.configure(DATABASES=databases, USE_TZ=True)
            django.setup()
        for url in sync.values():
            engine = create_engine(url)
            outbox_module.DEFAULT_TABLE.metadata.create_all(engine)
            engine.dispose()
        yield urls


@pytest.fixture(params=["default", "pg"])
def alias(request: pytest.FixtureRequest, django_databases: dict[str, str]) -> str:
    if request.param not in django_databases:
        pytest.skip(postgres.why_not() or "no PostgreSQL")
    return str(request.param)


class Abandoned(Exception):
    pass


def _in_django(alias: str, signature: Any, commit: bool) -> str | None:
    """A Django request's work, in a thread of its own (Django's ORM is sync): the row
    in ``transaction.atomic()``, committed or rolled back; Django's connection of this
    thread closed after, as its request cycle would."""
    from django.db import connections, transaction

    jid = None
    try:
        with transaction.atomic(using=alias):
            jid = outbox_module.enqueue_django(signature, using=alias)
            if not commit:
                raise Abandoned
    except Abandoned:
        pass
    finally:
        connections[alias].close()
    return jid


async def test_a_django_transaction_enqueues_with_its_commit_and_never_on_a_rollback(
    alias: str, django_databases: dict[str, str], redis_url: str, namespace: str,
) -> None:
    app: App = outboxapp.build(redis_url, namespace, django_databases[alias])
    note = JobFunction(app._client, app.registry["note"])
    try:
        await anyio.to_thread.run_sync(_in_django, alias, note.s("rolled back"), False)
        jid = await anyio.to_thread.run_sync(_in_django, alias, note.s("committed"), True)
        assert app.settings.outbox is not None
        relay = OutboxRelay(app.settings.outbox, app._store())

        assert await relay.relay_once() == 1
        raws = await app._store().client.lrange(Keys(namespace).queue("default"), 0, -1)
        assert [(p["jid"], p["args"]) for p in map(json.loads, raws)] == [
            (jid, ["committed"])]
    finally:
        await app.close()
        assert app.settings.outbox is not None
        await app.settings.outbox.engine.dispose()
