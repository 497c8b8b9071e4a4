"""SAQ: ``Queue.enqueue`` and its ``Worker`` (embedded: ``worker.start()`` in a task, as
``saq``'s own runner does after ``queue.connect()``).

SAQ has no bulk enqueue (``Queue.map`` enqueues with ``asyncio.gather`` and then waits for
results): ``enqueue-bulk`` gathers each chunk's ``enqueue`` calls.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import common
from saq import Queue, Worker


async def noop(ctx: dict[str, Any], *, ts: float) -> None:
    await common.noop(ts)


async def sleep(ctx: dict[str, Any], *, ts: float) -> None:
    await common.sleep(ts)


async def probe(ctx: dict[str, Any], *, ts: float) -> None:
    await common.probe(ts)


class SaqPeer:
    bulk_method = "gather"

    def __init__(self, args: argparse.Namespace) -> None:
        self.url = args.redis_url
        self.queue: Any = None

    async def one(self, job: str, ts: float) -> None:
        await self.queue.enqueue(job, ts=ts)

    async def bulk(self, job: str, stamps: list[float]) -> None:
        await asyncio.gather(*(self.queue.enqueue(job, ts=ts) for ts in stamps))

    @asynccontextmanager
    async def client(self) -> AsyncIterator[SaqPeer]:
        self.queue = Queue.from_url(self.url)
        await self.queue.connect()
        try:
            yield self
        finally:
            await self.queue.disconnect()

    @asynccontextmanager
    async def worker(self, concurrency: int) -> AsyncIterator[Any]:
        queue = Queue.from_url(self.url)
        await queue.connect()
        worker = Worker(queue, functions=[noop, sleep, probe], concurrency=concurrency)
        task = asyncio.create_task(worker.start())
        try:
            yield worker
        finally:
            worker.event.set()  # what SIGTERM does: start() then stops the worker
            await asyncio.wait_for(task, 30)
            await queue.disconnect()


if __name__ == "__main__":
    common.run(SaqPeer)
