"""streaq: ``task.enqueue(...)`` (awaited), ``Worker.enqueue_many`` (one pipeline) and
``Worker.run_async`` (embedded, ``handle_signals=False``). Redis streams, with a consumer
group: a fetched task stays pending until it is acknowledged. ``streaq_app.py`` gives
the same worker to ``streaq run``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import common
from streaq import Worker


class StreaqPeer:
    bulk_method = "enqueue_many"

    def __init__(self, args: argparse.Namespace, **options: Any) -> None:
        """``options``: more ``Worker`` arguments (``streaq_app.py``: its CLI's)."""
        self.url = args.redis_url
        self.concurrency = getattr(args, "concurrency", 16)
        options.setdefault("handle_signals", False)
        self.app: Worker[Any] = Worker(redis_url=self.url, concurrency=self.concurrency,
                                       **options)
        self.tasks = {name: self.app.task(name=name)(getattr(common, name))
                      for name in ("noop", "sleep", "probe")}

    async def one(self, job: str, ts: float) -> None:
        await self.tasks[job].enqueue(ts)

    async def bulk(self, job: str, stamps: list[float]) -> None:
        task = self.tasks[job]
        await self.app.enqueue_many([task.enqueue(ts) for ts in stamps])

    @asynccontextmanager
    async def client(self) -> AsyncIterator[StreaqPeer]:
        async with self.app:
            yield self

    @asynccontextmanager
    async def worker(self, concurrency: int) -> AsyncIterator[Any]:
        assert concurrency == self.concurrency
        task = asyncio.create_task(self.app.run_async())
        try:
            yield task
        finally:
            task.cancel()
            await asyncio.wait({task}, timeout=5)
            with contextlib.suppress(BaseException):
                task.result()


if __name__ == "__main__":
    common.run(StreaqPeer)
