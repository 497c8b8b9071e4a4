"""taskiq + taskiq-redis: ``task.kiq(...)`` and taskiq's ``Receiver`` — what
``taskiq worker`` runs in each worker process — started with ``taskiq.api.run_receiver_task``
(one process, no process manager).

Modes: ``list`` (``ListQueueBroker``: LPUSH/BRPOP, a fetched message is gone from Redis),
``stream`` (``RedisStreamBroker``: XADD/XREADGROUP/XACK, acknowledged after the run).
taskiq has no bulk enqueue: ``enqueue-bulk`` gathers each chunk's ``kiq`` calls.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import common
from taskiq.api import run_receiver_task
from taskiq_redis import ListQueueBroker, RedisStreamBroker


class TaskiqPeer:
    bulk_method = "gather"

    def __init__(self, args: argparse.Namespace) -> None:
        url = args.redis_url
        self.broker: Any = (RedisStreamBroker(url) if args.mode == "stream"
                            else ListQueueBroker(url))
        self.tasks = {
            name: self.broker.task(task_name=name)(getattr(common, name))
            for name in ("noop", "sleep", "probe")
        }

    async def one(self, job: str, ts: float) -> None:
        await self.tasks[job].kiq(ts)

    async def bulk(self, job: str, stamps: list[float]) -> None:
        task = self.tasks[job]
        await asyncio.gather(*(task.kiq(ts) for ts in stamps))

    @asynccontextmanager
    async def client(self) -> AsyncIterator[TaskiqPeer]:
        await self.broker.startup()  # the stream broker declares its consumer group here
        try:
            yield self
        finally:
            await self.broker.shutdown()

    @asynccontextmanager
    async def worker(self, concurrency: int) -> AsyncIterator[Any]:
        self.broker.is_worker_process = True
        await self.broker.startup()
        task = asyncio.create_task(run_receiver_task(self.broker,
                                                     max_async_tasks=concurrency))
        try:
            yield task
        finally:
            task.cancel()
            # The stream broker's receiver doesn't finish on cancellation while its
            # XREADGROUP blocks (it hangs): the stop is bounded (after the measurement).
            await asyncio.wait({task}, timeout=3)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.broker.shutdown(), 3)


if __name__ == "__main__":
    common.run(TaskiqPeer, modes=("list", "stream"))
