#!/usr/bin/env python3
"""What one coalesced enqueue costs Redis behind a large backlog (issue 40, 21).

    .venv/bin/python benchmarks/coalesce_cost.py [--backlog N] [--calls C]

On a private ``redis-server``: a coalesced job L of a key is pushed, then ``N`` plain jobs
behind it (``LPUSH``: L is the oldest, the far end from where new jobs go), then ``C``
enqueues of L's key, each merged into L (``coalesce.lua`` through the Store, as an
enqueue calls it). Then the same after L ran, failed and waits again on its queue for
its retry (its element there is no longer the raw the key's state holds: issue 40, 12).
Reported per scenario: Redis' own time per call (``INFO commandstats``: EVALSHA's
microseconds, the script and every command it runs; mean and max), and how the calls
ended (merged into L, or a new job). Last, what fetching a plain job costs Redis (the
fetch's share of the coalesce check every job's record goes through).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cogworker_async.jobs import wire  # noqa: E402
from cogworker_async.redis.moves import Failure  # noqa: E402
from cogworker_async.redis.store import Store  # noqa: E402
from tests.servers import ServerProcess  # noqa: E402

QUEUE = "default"
IDENTITY = "host:1:bench"
CHUNK = 10_000
PLAIN_JOBS = 20_000


def raw_job(value: object) -> bytes:
    payload = wire.build("note", ["k", value], {}, queue=QUEUE, retry=True, now=time.time())
    return wire.encode_new(payload, wire.NO_SIZE_LIMIT)


async def evalsha_usec(store: Store) -> tuple[int, int]:
    stats = await store.client.info("commandstats")
    entry = stats.get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(entry["calls"]), int(entry["usec"])


async def merges(store: Store, calls: int) -> dict[str, object]:
    """``calls`` coalesced enqueues of key "c": Redis µs per call (mean, max) and how
    they ended."""
    ended: dict[str, int] = {}
    spent: list[int] = []
    for value in range(calls):
        raw = raw_job(value)
        _, before = await evalsha_usec(store)
        how, _ = await store.dedup.coalesce("c", json.loads(raw)["jid"], QUEUE, raw,
                                            name="note")
        _, after = await evalsha_usec(store)
        spent.append(after - before)
        ended[how] = ended.get(how, 0) + 1
    return {"usec_mean": round(sum(spent) / len(spent), 1), "usec_max": max(spent),
            "ended": ended}


async def retried(store: Store) -> None:
    """L (the oldest, fetched first) fails and waits again on its queue, as a retry
    puts it back: its element there now carries its retry count."""
    [(_, raw)] = (await store.fetch(IDENTITY, [QUEUE], 1)).jobs
    payload = json.loads(raw)
    entry = json.dumps({**payload, "retry_count": 1}, separators=(",", ":")).encode()
    await store.file_failure(IDENTITY, QUEUE, raw, "retry", entry, 0.0,
                             failure=Failure(payload["jid"], "Boom: once", 2))
    due = await store.due(QUEUE, "retry", 10)
    await store.promote(QUEUE, "retry", [(member, member) for member in due])


async def plain_fetch(store: Store, jobs: int) -> float:
    """Redis µs per job of fetching ``jobs`` plain jobs (no dedup), 10 per fetch: what
    the record's ``coalesce`` check costs every job is in it."""
    queue = "plain"
    for start in range(0, jobs, 1000):
        await store.enqueue(queue, [raw_job(i) for i in range(start, min(jobs, start + 1000))],
                            name="note")
    _, before = await evalsha_usec(store)
    taken = 0
    while batch := (await store.fetch(IDENTITY, [queue], 10)).jobs:
        taken += len(batch)
    _, after = await evalsha_usec(store)
    return round((after - before) / max(taken, 1), 2)


async def main(backlog: int, calls: int) -> dict[str, object]:
    server = ServerProcess().start()
    store = Store.from_url(server.url, "bench")
    try:
        first = raw_job("first")
        await store.dedup.coalesce("c", json.loads(first)["jid"], QUEUE, first, name="note")
        filler = raw_job("filler")
        for start in range(0, backlog, CHUNK):
            await store.client.lpush(store.keys.queue(QUEUE),
                                     *([filler] * min(CHUNK, backlog - start)))
        queued = await merges(store, calls)
        await retried(store)
        return {"backlog": backlog, "calls": calls, "behind_backlog": queued,
                "after_a_retry": await merges(store, calls),
                "plain_fetch_usec_per_job": await plain_fetch(store, PLAIN_JOBS)}
    finally:
        await store.aclose()
        server.stop()
        server.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=600_000)
    parser.add_argument("--calls", type=int, default=200)
    options = parser.parse_args()
    print(json.dumps(asyncio.run(main(options.backlog, options.calls)), indent=2))
