"""Scenario 7 (R6): lost replies.

A fault proxy between the worker process and its private server forwards a chosen
script call, lets it run, then drops its reply and closes the connection: the worker
cannot know whether the script ran. docs/design.md, rules 1 and 2: no blind client retries
on moves; settle scripts are idempotent, so the worker's own retry is a no-op.

(a) the fetch (``fetch.lua``) — the moved jobs become ghosts on the worker's list; the
    reconcile pass requeues them after seeing them twice; each then runs exactly once;
(b) an ack (``ack.lua``) — the job is settled exactly once, never run again;
(c) a settlement (``file_failure.lua``) of a job that fails once — filed in retry
    exactly once, run exactly twice (the failure and the retry).

Settlements are counted from the server's keyspace events (an ``lrem`` only fires when
LREM removed something; a ``zadd`` on the retry set for each filing), the runs on the
witness. In every case no ghost stays and nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.scripts import SCRIPT_NAMES, source
from tests.servers import ServerProcess
from tests.worker.chaos.redisfaults.conftest import (
    SETTINGS,
    StartWorker,
    Witness,
    leftovers,
    log_count,
    report,
    wait_alive,
    wait_ready,
)
from tests.worker.chaos.redisfaults.faultapp import Jobs
from tests.worker.chaos.redisfaults.proxy import DropReply, LostReplyProxy

pytestmark = pytest.mark.timeout(60)

GHOST_BOUND = 2 * SETTINGS["recovery_interval"] * 1.2 + 2.0
"""Two reconcile passes (jittered), plus a margin for the busy machine and the run."""


def sha(name: str) -> str:
    return hashlib.sha1(source(name).encode()).hexdigest()


@dataclass
class Events:
    """Keyspace events of the namespace's keys, as (key, event), in order, and when the
    test received each."""

    namespace: str
    seen: list[tuple[str, str]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def count(self, key: str, event: str) -> int:
        return self.seen.count((key, event))

    def when(self, key: str, event: str) -> list[float]:
        return [t for t, seen in zip(self.times, self.seen, strict=True)
                if seen == (key, event)]


@contextlib.asynccontextmanager
async def keyspace_events(r: redis.asyncio.Redis, namespace: str) -> AsyncIterator[Events]:
    await r.config_set("notify-keyspace-events", "Klz")
    events = Events(namespace)
    pubsub = r.pubsub()
    channel = "__keyspace@0__:"
    await pubsub.psubscribe(f"{channel}{namespace}:*")
    ready = asyncio.Event()

    async def collect() -> None:
        async for message in pubsub.listen():
            if message["type"] == "psubscribe":
                ready.set()
            elif message["type"] == "pmessage":
                key = message["channel"].decode()[len(channel):]
                events.seen.append((key, message["data"].decode()))
                events.times.append(time.time())

    task = asyncio.ensure_future(collect())
    try:
        await asyncio.wait_for(ready.wait(), 5)
        yield events
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await pubsub.aclose()  # type: ignore[no-untyped-call]


@pytest.fixture
async def proxied(servers: Callable[..., ServerProcess],
                  clients: Callable[[str], redis.asyncio.Redis]
                  ) -> AsyncIterator[tuple[ServerProcess, LostReplyProxy]]:
    """A private server, its scripts loaded (EVALSHA never gets NOSCRIPT, so the
    dropped reply is always the script's own), and a proxy in front of it."""
    server = servers()
    r = clients(server.url)
    for name in SCRIPT_NAMES:
        assert await r.script_load(source(name)) == sha(name)
    proxy = await LostReplyProxy(server.port).start()
    try:
        yield server, proxy
    finally:
        await proxy.aclose()


def moved_jobs(reply: Any) -> bool:
    """A fetch reply that moved at least one job."""
    return isinstance(reply, list) and bool(reply) and bool(reply[0])


async def test_lost_fetch_reply(
    proxied: tuple[ServerProcess, LostReplyProxy], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    server, proxy = proxied
    r, jobs, keys = clients(server.url), make_jobs(server.url), Keys(namespace)
    rule = proxy.arm(DropReply(sha("fetch"), when=moved_jobs))
    identity = "fault-7a"
    worker = start_worker(proxy.url, "--concurrency", "4", identity=identity)
    await wait_ready(r, namespace, worker)

    ghosts = [f"ghost-{i}" for i in range(3)]
    async with keyspace_events(r, namespace) as events:
        await jobs.record.enqueue_many([((tag,), {}) for tag in ghosts])
        await wait_alive(worker, lambda: _dropped(rule), timeout=10)
        dropped_at = rule.dropped[0][0]
        ghosted = await r.lrange(keys.in_progress("default", identity), 0, -1)
        # Moved, reply lost: on the list, and nobody runs them (yet).
        assert len(ghosted) == 3
        assert await witness.starts() == {}
        later = [f"later-{i}" for i in range(3)]
        await jobs.record.enqueue_many([((tag,), {}) for tag in later])
        await wait_alive(worker, lambda: _done(r, witness, namespace, 6), timeout=20)

    started = await witness.started()
    ghost_s = min(e["t"] for e in started if e["tag"] in ghosts) - dropped_at
    starts = await witness.starts()
    report("7a-lost-fetch-reply", jobs=6, ghosts=len(ghosted), lost=6 - await witness.finished(),
           ghost_seconds=round(ghost_s, 3), bound=GHOST_BOUND, runs=dict(starts),
           requeued_by_reconcile=log_count(worker, "requeued stray in-progress job"),
           fetch_requests=rule.requests)
    assert starts == dict.fromkeys(ghosts + later, 1)  # each run exactly once
    assert ghost_s <= GHOST_BOUND
    assert log_count(worker, "requeued stray in-progress job") == 3
    # Each ghost went back to its queue once (give_back's RPUSH), nothing else did.
    assert events.count(keys.queue("default"), "rpush") == 3
    await worker.stop()
    assert not any((await leftovers(r, namespace)).values())


async def test_lost_fetch_reply_while_fetches_keep_failing(
    proxied: tuple[ServerProcess, LostReplyProxy], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    """(a) on a flapping link: the fetch that moved the jobs loses its reply, and so do
    the next few fetches (the worker backs off 0.1, 0.2, 0.4 ... s between them). The
    ghosts must not wait for the link to heal: reconcile requeues them meanwhile."""
    server, proxy = proxied
    r, jobs, keys = clients(server.url), make_jobs(server.url), Keys(namespace)
    failing = 6
    rule = proxy.arm(DropReply(sha("fetch"), times=failing))
    rule.when = lambda reply: bool(rule.dropped) or moved_jobs(reply)
    worker = start_worker(proxy.url, "--concurrency", "4", identity="fault-7a-flapping")
    await wait_ready(r, namespace, worker)

    ghosts = [f"ghost-{i}" for i in range(3)]
    async with keyspace_events(r, namespace) as events:
        await jobs.record.enqueue_many([((tag,), {}) for tag in ghosts])
        await wait_alive(worker, lambda: _done(r, witness, namespace, 3), timeout=30)
    first_drop, last_drop = rule.dropped[0][0], rule.dropped[-1][0]
    requeued = events.when(keys.queue("default"), "rpush")
    starts = await witness.starts()
    report("7a-lost-fetch-reply-flapping", jobs=3, lost=3 - await witness.finished(),
           failed_fetches=len(rule.dropped), runs=dict(starts),
           requeue_rounds=len(requeued) // 3,
           requeued_after_s=[round(t - first_drop, 3) for t in requeued[2::3]],
           link_healed_after_s=round(last_drop - first_drop, 3))
    assert len(rule.dropped) == failing
    assert starts == dict.fromkeys(ghosts, 1)
    # Each failing fetch moves them again (its reply lost too): requeued each time,
    # the first time within two reconcile passes, while the fetches were still failing.
    assert len(requeued) % 3 == 0
    assert len(requeued) >= 3
    assert requeued[2] - first_drop <= GHOST_BOUND
    assert requeued[2] < last_drop
    await worker.stop()
    assert not any((await leftovers(r, namespace)).values())


async def test_lost_ack_reply(
    proxied: tuple[ServerProcess, LostReplyProxy], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    server, proxy = proxied
    r, jobs, keys = clients(server.url), make_jobs(server.url), Keys(namespace)
    rule = proxy.arm(DropReply(sha("ack"), when=lambda reply: reply == 1))
    identity = "fault-7b"
    worker = start_worker(proxy.url, "--concurrency", "4", identity=identity)
    await wait_ready(r, namespace, worker)

    tags = [f"acked-{i}" for i in range(3)]
    async with keyspace_events(r, namespace) as events:
        await jobs.record.enqueue_many([((tag,), {}) for tag in tags])
        await wait_alive(worker, lambda: _dropped(rule), timeout=10)
        await wait_alive(worker, lambda: _done(r, witness, namespace, 3), timeout=20)
        await _quiet_reconciles(r, worker)
    removed = events.count(keys.in_progress("default", identity), "lrem")
    starts = await witness.starts()
    report("7b-lost-ack-reply", jobs=3, lost=3 - await witness.finished(), runs=dict(starts),
           ack_requests=rule.requests, settled=removed)
    assert starts == dict.fromkeys(tags, 1)
    # The lost ack was sent again (acks of jobs finishing together may share a call).
    assert rule.requests >= 2
    assert removed == 3  # each job taken off the list exactly once
    await worker.stop()
    assert not any((await leftovers(r, namespace)).values())


async def test_lost_settlement_reply(
    proxied: tuple[ServerProcess, LostReplyProxy], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    server, proxy = proxied
    r, jobs, keys = clients(server.url), make_jobs(server.url), Keys(namespace)
    rule = proxy.arm(DropReply(sha("file_failure"), when=lambda reply: reply == 1))
    identity = "fault-7c"
    worker = start_worker(proxy.url, "--concurrency", "4", identity=identity)
    await wait_ready(r, namespace, worker)

    async with keyspace_events(r, namespace) as events:
        await jobs.flaky.enqueue("flaky")
        await jobs.record.enqueue_many([((f"ok-{i}",), {}) for i in range(2)])
        await wait_alive(worker, lambda: _dropped(rule), timeout=10)
        await wait_alive(worker, lambda: _done(r, witness, namespace, 3), timeout=20)
        await _quiet_reconciles(r, worker)
    filed = events.count(keys.retry("default"), "zadd")
    removed = events.count(keys.in_progress("default", identity), "lrem")
    starts = await witness.starts()
    report("7c-lost-settlement-reply", jobs=3, lost=3 - await witness.finished(),
           runs=dict(starts), file_failure_requests=rule.requests, filed_in_retry=filed,
           settled=removed)
    assert starts == {"flaky": 2, "ok-0": 1, "ok-1": 1}  # the failure and its one retry
    assert rule.requests == 2  # the filing, and its retry (a no-op: the LPOS guard)
    assert filed == 1
    assert removed == 4  # two acks, the filing, the retried run's ack
    await worker.stop()
    assert not any((await leftovers(r, namespace)).values())


async def _dropped(rule: DropReply) -> bool:
    return bool(rule.dropped)


async def _done(r: redis.asyncio.Redis, witness: Witness, namespace: str, total: int) -> bool:
    return await witness.finished() == total and not any(
        (await leftovers(r, namespace)).values())


async def _quiet_reconciles(r: redis.asyncio.Redis, worker: Any) -> None:
    """Until at least two more upkeep passes ran (each reads lists with LRANGE: its
    reconcile, and the heads of repeat_orphans and unsettled when it holds the recovery
    lock): a late, wrong settle or requeue would show in the events by then."""
    before = await _lrange_calls(r)

    async def passes() -> bool:
        return await _lrange_calls(r) >= before + 6

    await wait_alive(worker, passes, timeout=10)


async def _lrange_calls(r: redis.asyncio.Redis) -> int:
    stats = await r.info("commandstats")
    return int(stats.get("cmdstat_lrange", {}).get("calls", 0))


async def test_lost_first_beat_reply(
    proxied: tuple[ServerProcess, LostReplyProxy], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    """The first beat's reply is lost (a lossy link as the worker starts): the worker
    beats again and starts, rather than exit as if Redis were unreachable."""
    server, proxy = proxied
    r, jobs = clients(server.url), make_jobs(server.url)
    rule = proxy.arm(DropReply(sha("beat")))
    worker = start_worker(proxy.url, "--concurrency", "2")
    await wait_ready(r, namespace, worker)
    await jobs.record.enqueue("after-a-lost-first-beat")
    await wait_alive(worker, lambda: _done(r, witness, namespace, 1), timeout=20)
    report("7d-lost-first-beat-reply", beat_requests=rule.requests, dropped=len(rule.dropped))
    assert len(rule.dropped) == 1
    assert "first heartbeat failed" in worker.log()
    await worker.stop()


async def test_lost_stats_flush_reply_counts_once(
    proxied: tuple[ServerProcess, LostReplyProxy], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    """(d) the stats flush (``add_stats.lua``): its reply lost, the worker sends the same
    flush again under its number; the totals count every run once."""
    server, proxy = proxied
    r, jobs, keys = clients(server.url), make_jobs(server.url), Keys(namespace)
    rule = proxy.arm(DropReply(sha("add_stats"), when=lambda reply: reply == 1))
    worker = start_worker(proxy.url, "--concurrency", "4", identity="fault-7d")
    await wait_ready(r, namespace, worker)
    tags = [f"counted-{i}" for i in range(5)]
    await jobs.record.enqueue_many([((tag,), {}) for tag in tags])
    await wait_alive(worker, lambda: _dropped(rule), timeout=10)
    await wait_alive(worker, lambda: _done(r, witness, namespace, 5), timeout=20)

    async def processed() -> int:
        return int(await r.get(keys.stats_processed) or 0)

    await wait_alive(worker, lambda: _at_least(processed, 5), timeout=10)
    await worker.stop()  # the hand-over flushes once more
    report("7d-lost-stats-reply", runs=5, processed=await processed(),
           flush_requests=rule.requests)
    assert rule.requests >= 2
    assert await processed() == 5


async def _at_least(read: Callable[[], Any], bound: int) -> bool:
    return int(await read()) >= bound
