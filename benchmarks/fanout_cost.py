#!/usr/bin/env python3
"""What a fan-out after one parent costs (issue 40, 22): N dependents enqueued with
``options(after=[parent]).enqueue_many(...)`` on a private ``redis-server``, no worker.

    .venv/bin/python benchmarks/fanout_cost.py [N ...]      # default: 1000 4000

Reported per N: the wall time (one round trip per dependent: each waits on its own) and
Redis' own time per command (``INFO commandstats``, the scripts' inner commands
included), the heaviest first. Linear is the claim: each watch adds one member to the
parent's watchers set and writes its record once, whatever N (a record naming every
watcher, rewritten at each watch, made 10,000 dependents cost 60 s of Redis time).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cogworker_async import App  # noqa: E402
from tests.servers import ServerProcess  # noqa: E402

TOP_COMMANDS = 6


async def one(url: str, n: int) -> None:
    app = App(url, namespace=f"bench-{uuid.uuid4().hex[:8]}")

    @app.job(name="parent")
    async def parent() -> None: ...

    @app.job(name="child")
    async def child(i: int) -> None: ...

    try:
        jid = await parent.enqueue()
        client = app._store().client
        await client.execute_command("CONFIG", "RESETSTAT")
        started = time.perf_counter()
        await child.options(after=[jid]).enqueue_many([((i,), {}) for i in range(n)])
        took = time.perf_counter() - started
        stats = await client.info("commandstats")
        top = sorted(((v["usec"], k, v["calls"]) for k, v in stats.items()),
                     reverse=True)[:TOP_COMMANDS]
        print(f"n={n}: {took:.2f} s wall ({took / n * 1e3:.2f} ms a dependent); Redis: "
              + ", ".join(f"{k} {u / 1e6:.2f} s/{c} calls" for u, k, c in top), flush=True)
    finally:
        await app.close()


async def main(sizes: list[int]) -> None:
    server = ServerProcess().start()
    try:
        for n in sizes:
            await one(server.url, n)
    finally:
        server.cleanup()


if __name__ == "__main__":
    asyncio.run(main([int(a) for a in sys.argv[1:]] or [1000, 4000]))
