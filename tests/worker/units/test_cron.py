"""CronTicker on its own: each due tick of a periodic job is enqueued once, however
many processes tick, and a schedule never claimed does not run for a tick long past."""

from __future__ import annotations

import json
import time
from functools import partial

import anyio
import pytest

from cogworker_async import App
from cogworker_async.jobs.periodic import Periodic
from cogworker_async.redis.store import Store
from cogworker_async.worker.cron import TICK_GRACE, CronTicker, periodic_job
from tests.waiting import wait_until

EVERY_SECOND = "* * * * * *"
YEARLY = "0 0 1 1 *"


def ticker_for(store: Store, redis_url: str, namespace: str, schedule: str) -> CronTicker:
    app = App(redis_url, namespace=namespace)

    @app.periodic(schedule, name="report")
    async def report() -> None: ...

    return CronTicker(store, list(app.periodics.values()), partial(periodic_job, app.registry))


@pytest.fixture
def ticker(store: Store, redis_url: str, namespace: str) -> CronTicker:
    return ticker_for(store, redis_url, namespace, EVERY_SECOND)


async def queued(store: Store) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in await store.client.lrange(store.keys.queue("default"),
                                                                   0, -1)]


async def test_a_tick_is_enqueued_once_across_processes(
    store: Store, redis_url: str, namespace: str
) -> None:
    first = ticker_for(store, redis_url, namespace, EVERY_SECOND)
    second = ticker_for(store, redis_url, namespace, EVERY_SECOND)
    now = time.time()
    assert await first.tick(now) + await second.tick(now) == 1
    [enqueued] = await queued(store)
    assert enqueued["periodic"] == "report"
    assert enqueued["periodic_tick"] == Periodic("report", EVERY_SECOND,
                                                 first.periodics[0].tz).latest_tick(now)


async def test_ticking_again_within_a_tick_enqueues_nothing(ticker: CronTicker,
                                                           store: Store) -> None:
    now = time.time()
    assert [await ticker.tick(now), await ticker.tick(now + 0.001)] == [1, 0]
    assert await ticker.tick(now + 1) == 1  # the next second's tick
    assert len(await queued(store)) == 2


async def test_a_new_schedule_does_not_run_for_a_tick_long_past(
    store: Store, redis_url: str, namespace: str
) -> None:
    yearly = ticker_for(store, redis_url, namespace, YEARLY)
    tick = yearly.periodics[0].latest_tick(time.time())
    assert await yearly.tick(tick + TICK_GRACE + 1) == 0
    assert await yearly.tick(tick + 1) == 1  # within the grace: it runs


async def test_the_running_ticker_enqueues_due_ticks(ticker: CronTicker, store: Store) -> None:
    async def enqueued() -> bool:
        return len(await queued(store)) >= 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker.run)
        await wait_until(enqueued, timeout=5)
        tg.cancel_scope.cancel()


async def test_ticks_nobody_claimed_are_said_and_only_the_latest_runs(
    ticker: CronTicker, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    now = time.time()
    assert await ticker.tick(now) == 1
    # Every process stalled for three seconds: the next tick claimed is the latest due.
    with caplog.at_level("WARNING", logger="cogworker_async.worker.cron"):
        assert await ticker.tick(now + 3) == 1
    assert [job["periodic_tick"] for job in await queued(store)] == [
        ticker.periodics[0].latest_tick(now + 3), ticker.periodics[0].latest_tick(now)]
    [warning] = [r.getMessage() for r in caplog.records if "missed" in r.getMessage()]
    assert "report missed 2 tick(s)" in warning


async def test_a_tick_another_process_claimed_is_not_called_missed(
    store: Store, redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = ticker_for(store, redis_url, namespace, EVERY_SECOND)
    second = ticker_for(store, redis_url, namespace, EVERY_SECOND)
    now = time.time()
    assert await first.tick(now) == 1
    assert await second.tick(now + 1) == 1  # first slept through this one
    with caplog.at_level("WARNING", logger="cogworker_async.worker.cron"):
        assert await first.tick(now + 2) == 1
    assert not [r for r in caplog.records if "missed" in r.getMessage()]
