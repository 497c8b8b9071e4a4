"""cogworker-async through its public API: ``App``, ``@jobs.job``, ``enqueue``,
``enqueue_many`` and ``jobs.worker(concurrency=...)`` (reliable fetch: the default).

Here the worker runs embedded (``async with jobs.worker(...)``) under ``uvloop.run``;
``cogworker_app.py`` gives the same ``App`` to ``cogworker-async run`` (which runs on
uvloop when it is installed) for the ``noop`` and ``processes`` scenarios.

Modes: ``default`` (reliable fetch), ``basic`` (``fetch="basic"``, for comparison only).
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import common

from cogworker_async import App


class CogworkerPeer:
    def __init__(self, args: argparse.Namespace) -> None:
        fetch = "basic" if args.mode == "basic" else "reliable"
        self.app = App(args.redis_url, fetch=fetch)
        self.jobs = {
            "noop": self.app.job(name="bench.noop", retry=False)(common.noop),
            "sleep": self.app.job(name="bench.sleep", retry=False)(common.sleep),
            "probe": self.app.job(name="bench.probe", retry=False)(common.probe),
        }
        self.bulk_method = "enqueue_many"

    async def one(self, job: str, ts: float) -> None:
        await self.jobs[job].enqueue(ts)

    async def bulk(self, job: str, stamps: list[float]) -> None:
        await self.jobs[job].enqueue_many([((ts,), {}) for ts in stamps])

    @asynccontextmanager
    async def client(self) -> AsyncIterator[CogworkerPeer]:
        try:
            yield self
        finally:
            await self.app.close()

    @asynccontextmanager
    async def worker(self, concurrency: int) -> AsyncIterator[Any]:
        async with self.app.worker(concurrency=concurrency) as manager:
            yield manager
        await self.app.close()


if __name__ == "__main__":
    common.run(CogworkerPeer, modes=("default", "basic"))
