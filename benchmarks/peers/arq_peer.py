"""arq: ``ArqRedis.enqueue_job`` and its ``Worker`` (embedded, ``handle_signals=False``).

Modes: ``default`` (arq's defaults: ``poll_delay=0.5``), ``poll10ms`` (``poll_delay=0.01``,
the tuned setting the issue quotes). arq has no bulk enqueue: ``enqueue-bulk`` runs each
chunk's ``enqueue_job`` calls concurrently (``asyncio.gather``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import common
from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.worker import Worker, func


async def noop(ctx: dict[str, Any], ts: float) -> None:
    await common.noop(ts)


async def sleep(ctx: dict[str, Any], ts: float) -> None:
    await common.sleep(ts)


async def probe(ctx: dict[str, Any], ts: float) -> None:
    await common.probe(ts)


class ArqPeer:
    bulk_method = "gather"

    def __init__(self, args: argparse.Namespace) -> None:
        self.settings = RedisSettings.from_dsn(args.redis_url)
        self.poll_delay = 0.01 if args.mode == "poll10ms" else 0.5
        self.pool: ArqRedis | None = None

    async def one(self, job: str, ts: float) -> None:
        assert self.pool is not None
        await self.pool.enqueue_job(job, ts)

    async def bulk(self, job: str, stamps: list[float]) -> None:
        assert self.pool is not None
        await asyncio.gather(*(self.pool.enqueue_job(job, ts) for ts in stamps))

    @asynccontextmanager
    async def client(self) -> AsyncIterator[ArqPeer]:
        self.pool = await create_pool(self.settings)
        try:
            yield self
        finally:
            await self.pool.aclose()

    @asynccontextmanager
    async def worker(self, concurrency: int) -> AsyncIterator[Worker]:
        worker = Worker(
            functions=[func(noop, name="noop"), func(sleep, name="sleep"),
                       func(probe, name="probe")],
            redis_settings=self.settings, max_jobs=concurrency,
            poll_delay=self.poll_delay, handle_signals=False,
        )
        task = asyncio.create_task(worker.main())
        try:
            yield worker
        finally:
            # close() cancels the job tasks and then gathers them: their CancelledError
            # is expected here.
            with contextlib.suppress(asyncio.CancelledError):
                await worker.close()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


if __name__ == "__main__":
    common.run(ArqPeer, modes=("default", "poll10ms"))
