"""A queue per tenant: 20,000 registered queue names. No read walks all of them — a
status lookup, the dashboard's header and index, the Queues tab and a Prometheus scrape
each read a bounded number of queues (counted here in commands Redis ran, and in the
size of what comes back), and say how many they left out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Final

import httpx
import pytest
import redis.asyncio

from cogworker_async import App
from cogworker_async.admin import Inspector
from cogworker_async.admin.api import MAX_QUEUES_READ, QUEUES_PAGE_SIZE, TOP_QUEUES
from cogworker_async.enqueue.lookup import MAX_QUEUES_LOOKED_IN
from cogworker_async.redis.keys import Keys
from cogworker_async.web import create_dashboard
from tests.prometheus.scraping import parse, value

TENANTS: Final = 20_000
BASE_URL: Final = "http://dashboard.test"


@pytest.fixture
async def r(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def tenants(r: redis.asyncio.Redis, namespace: str) -> list[str]:
    """20,000 queue names in the registry, written in one pipeline."""
    names = [f"tenant-{n:05d}" for n in range(TENANTS)]
    async with r.pipeline(transaction=False) as pipe:
        for start in range(0, TENANTS, 1000):
            pipe.sadd(Keys(namespace).queues, *names[start:start + 1000])
        await pipe.execute()
    return names


async def calls(r: redis.asyncio.Redis, command: str) -> int:
    """How many times the server ran ``command`` so far."""
    stats = await r.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_a_status_lookup_reads_one_record_not_one_per_queue(
    r: redis.asyncio.Redis, tenants: list[str], make_app: Callable[..., App],
) -> None:
    jobs = make_app()

    @jobs.job(name="work")
    async def work() -> None: ...

    jid = await work.options(queue=tenants[-1]).enqueue()
    assert jid is not None
    # A record is read with an HGET of its queue's live hash (then a GET of its key).
    before = await calls(r, "hget")
    found = await jobs.status(jid)  # this App enqueued it: it knows where
    assert (found.state, found.queue) == ("queued", tenants[-1])
    assert (await jobs.status(jid, queue=tenants[-1])).state == "queued"
    assert await calls(r, "hget") - before == 2  # one record read each

    # Enqueued by another process: no walk of 20,000 records, but a clear error.
    other = make_app()
    before = await calls(r, "hget")
    with pytest.raises(ValueError, match=rf"at most {MAX_QUEUES_LOOKED_IN}.*pass queue="):
        await other.status(jid)
    with pytest.raises(ValueError, match="pass queue="):
        await other.result(jid, timeout=1)
    assert await calls(r, "hget") == before
    assert (await other.status(jid, queue=tenants[-1])).state == "queued"


async def test_the_dashboard_reads_and_shows_a_bounded_number_of_queues(
    r: redis.asyncio.Redis, tenants: list[str], make_app: Callable[..., App],
) -> None:
    jobs = make_app()

    @jobs.job(name="work")
    async def work() -> None: ...

    for _ in range(3):
        await work.options(queue=tenants[0]).enqueue()
    known = len(Inspector(jobs).known_queues())
    summary = await Inspector(jobs).summary()
    assert summary["queue_count"] == TENANTS + known
    assert summary["queues_read"] == MAX_QUEUES_READ
    assert len(summary["queues"]) == TOP_QUEUES
    assert summary["queues"][0]["name"] == tenants[0]  # the largest first
    assert summary["enqueued"] == 3

    transport = httpx.ASGITransport(app=create_dashboard(jobs))
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        before = await calls(r, "llen")
        index = await http.get("/")
        assert index.status_code == 200
        assert await calls(r, "llen") - before <= MAX_QUEUES_READ  # one header's read
        assert len(index.content) < 100_000  # was 2.6 MB
        assert f"of {TENANTS + known:,} queues" in index.text

        before = await calls(r, "llen")
        listed = await http.get("/queues", params={"page": 2})
        assert listed.status_code == 200
        # The page's queues, and the header's bounded read.
        assert await calls(r, "llen") - before <= QUEUES_PAGE_SIZE + MAX_QUEUES_READ
        assert listed.text.count('href="/queues/tenant-') == QUEUES_PAGE_SIZE
        assert "page 2 of" in listed.text
        assert len(listed.content) < 300_000  # was 9 MB

        metrics = await http.get("/metrics")
    samples = parse(metrics.text)
    assert value(samples, "cogworker_up") == 1
    assert len([s for s in samples if s.name == "cogworker_queue_size"]) == MAX_QUEUES_READ
    assert value(samples, "cogworker_queues_not_exported") == TENANTS + known - MAX_QUEUES_READ
    assert value(samples, "cogworker_queue_size", queue=tenants[0]) == 3
