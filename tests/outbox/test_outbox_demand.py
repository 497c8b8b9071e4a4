"""Scale to zero with the outbox (issue 40, defect 8): rows committed while no worker
runs (so no relay) count in ``cogworker_queue_demand``, the gauge the deploying guide's
autoscaler recipe scales on — else no worker ever starts to relay them. On SQLite and
a private PostgreSQL, with a real Redis."""

from __future__ import annotations

import logging
import threading

import pytest
from prometheus_client.samples import Sample
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from cogworker_async import App
from cogworker_async import outbox as outbox_module
from cogworker_async.admin import Inspector
from cogworker_async.outbox.relay import OutboxRelay
from cogworker_async.prometheus.system import render
from tests.outbox import outboxapp
from tests.outbox.test_outbox import app_job
from tests.prometheus.scraping import parse, value
from tests.waiting import wait_until


def sqlite_threads() -> set[threading.Thread]:
    """aiosqlite's connection threads alive now (one per connection, opened or not)."""
    return {thread for thread in threading.enumerate()
            if thread.name.endswith("(_connection_worker_thread)") and thread.is_alive()}


async def gauges(app: App) -> list[Sample]:
    body, _ = await render(Inspector(app))
    return parse(body.decode())


async def test_rows_committed_while_no_worker_runs_count_in_the_demand(
    app: App, engine: AsyncEngine, namespace: str,
) -> None:
    job = app_job(app)
    async with AsyncSession(engine) as session, session.begin():
        for n in range(3):
            await outbox_module.enqueue(session, job.s(f"d{n}"))
        for n in range(2):  # a queue nothing was ever pushed to
            await outbox_module.enqueue(session, job.options(queue="fresh").s(f"f{n}"))

    now = await gauges(app)
    assert value(now, "cogworker_queue_demand", queue="default") == 3
    assert value(now, "cogworker_queue_demand", queue="fresh") == 2
    assert value(now, "cogworker_outbox_rows", queue="default") == 3

    # relayed: the same demand, now from Redis (counted once, not twice)
    relay = OutboxRelay(app.settings.outbox, app._store(), app.registry.keys())
    assert await relay.relay_once() == 5
    now = await gauges(app)
    assert value(now, "cogworker_queue_demand", queue="default") == 3
    assert value(now, "cogworker_outbox_rows", queue="default") is None

    async with app.worker():  # the worker the autoscaler starts: runs them, demand 0
        async def done() -> bool:
            return value(await gauges(app), "cogworker_queue_demand",
                         queue="default") == 0
        await wait_until(done, timeout=30)


async def test_a_database_out_of_reach_leaves_the_redis_figures(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture,
) -> None:
    before = sqlite_threads()
    app = outboxapp.build(redis_url, namespace, "sqlite+aiosqlite:////nonexistent-dir/x.db")
    try:
        caplog.set_level(logging.WARNING)
        await app_job(app).enqueue("now")
        now = await gauges(app)
        assert value(now, "cogworker_up") == 1
        assert value(now, "cogworker_queue_demand", queue="default") == 1
        assert any("reading the outbox" in r.getMessage() for r in caplog.records)
    finally:
        await app.close()
        assert app.settings.outbox is not None
        await app.settings.outbox.engine.dispose()
        # A connect that failed left its thread to hand the result of the stop() it
        # queued to this loop (aiosqlite's _connect; nothing awaits it). The loop must
        # outlive that hand-over, else the thread raises "Event loop is closed" (it did,
        # on a loaded machine, once the test had ended).
        await wait_until(lambda: not sqlite_threads() - before)
