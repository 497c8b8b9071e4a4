"""A live worker writes its runs to the per-minute run metrics with its stats flush."""

from __future__ import annotations

import time
from collections.abc import Callable

from cogworker_async import App
from cogworker_async.redis.store import Store
from cogworker_async.run_metrics import RETENTION, JobMinute, minute_of, parse, summed
from tests.waiting import wait_until


async def stored(store: Store, since: float) -> dict[str, JobMinute]:
    minutes = list(range(minute_of(since), minute_of(time.time()) + 1))
    return summed(parse(fields) for fields in await store.run_metrics(minutes))


async def test_runs_and_failures_reach_the_minute_they_ended_in(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    began = time.time()

    @jobs.job(name="ok")
    async def ok(n: int) -> None:
        pass

    @jobs.job(name="bad", retry=False)
    async def bad() -> None:
        raise ValueError("no")

    for n in range(30):
        await ok.enqueue(n)
    await bad.enqueue()
    await bad.enqueue()

    async def all_written() -> bool:
        found = await stored(store, began)
        return "ok" in found and found["ok"].runs == 30 and "bad" in found \
            and found["bad"].runs == 2

    async with jobs.worker():
        await wait_until(all_written, timeout=10)
    found = await stored(store, began)
    assert found["ok"].failed == 0
    assert sum(found["ok"].histogram) == 30
    assert found["bad"].failed == 2
    keys = [store.keys.run_metrics(minute)
            for minute in range(minute_of(began), minute_of(time.time()) + 1)]
    ttls = [await store.client.ttl(key) for key in keys]
    assert [ttl for ttl in ttls if ttl != -2]  # a key per minute with runs...
    assert all(0 < ttl <= RETENTION for ttl in ttls if ttl != -2)  # ...each expiring
