"""The job app of the outbox tests: an App whose outbox is the test's database, run by
the real CLI as ``cogworker-async outbox-relay tests.outbox.outboxapp:jobs`` (the relay
alone) from the environment (``E2E_REDIS_URL``, ``E2E_NAMESPACE``, ``OUTBOX_DB``: the
database's async SQLAlchemy URL). ``note(tag)`` appends its tag to ``<ns>:outbox:ran``."""

from __future__ import annotations

import os
from typing import Any, Final

from sqlalchemy.ext.asyncio import create_async_engine

from cogworker_async import App
from cogworker_async.outbox import Outbox
from tests.clients import async_client
from tests.worker.e2e.jobsapp import FAST, NAMESPACE_ENV, URL_ENV

DB_ENV: Final = "OUTBOX_DB"


def ran_key(namespace: str) -> str:
    return f"{namespace}:outbox:ran"


def build(url: str, namespace: str, db: str | None, **overrides: Any) -> App:
    outbox = Outbox(create_async_engine(db), batch=20, interval=0.05) if db else None
    app = App(url, namespace=namespace, outbox=outbox, **{**FAST, **overrides})

    @app.job(name="note", retry=0)
    async def note(tag: str) -> None:
        client = async_client(url)
        try:
            await client.rpush(ran_key(namespace), tag)
        finally:
            await client.aclose()

    return app


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None
    return build(url, os.environ[NAMESPACE_ENV], os.environ[DB_ENV])


jobs = _from_env()
