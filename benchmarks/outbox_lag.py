#!/usr/bin/env python3
"""Outbox row of ``make bench``: how long a job written with ``outbox.enqueue`` waits
between its transaction's commit and its start in a worker — the relay's lag, plus the
worker's pick-up — at a steady rate of commits.

    .venv/bin/python benchmarks/outbox_lag.py [--quick] [--runs R] [--json PATH]

Runs with the project's venv (``benchmarks/run.py`` calls it for its ``outbox``
scenario), on a private ``redis-server`` and an SQLite file (a single-writer database:
the relay's passes and the commits take turns on it). One process: commits of one job
each, ``RATE`` a second for ``N`` jobs, while an embedded worker (concurrency 10) relays
the outbox (``App(outbox=Outbox(engine))``, the defaults: batches of 100, a pass every
0.2 s when the last found less) and runs the jobs. Each job notes its start; its commit
time is taken just after the commit returns. Reported: p50, p99 and max of start −
commit, over every job of every run, and the relay's pass settings.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine  # noqa: E402

from cogworker_async import App, outbox  # noqa: E402
from cogworker_async.outbox import RELAY_BATCH, RELAY_INTERVAL, Outbox  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Sizes:
    runs: int
    jobs: int
    rate: float
    """Commits a second."""


FULL: Final = Sizes(runs=3, jobs=3000, rate=300.0)
QUICK: Final = Sizes(runs=1, jobs=600, rate=200.0)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def one_run(url: str, sizes: Sizes) -> list[float]:
    """The start − commit of every job of one run, in seconds."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/bench.sqlite")
    async with engine.begin() as conn:
        await conn.run_sync(outbox.DEFAULT_TABLE.metadata.create_all)
    app = App(url, namespace="bench-outbox", outbox=Outbox(engine), concurrency=10,
              track_jobs=False)
    committed: dict[int, float] = {}
    started: dict[int, float] = {}
    all_started = asyncio.Event()

    @app.job(name="bench.outboxed", retry=False)
    async def outboxed(n: int) -> None:
        started[n] = time.time()
        if len(started) == sizes.jobs:
            all_started.set()

    try:
        async with app.worker():
            began = time.monotonic()
            for n in range(sizes.jobs):
                await asyncio.sleep(max(0.0, began + n / sizes.rate - time.monotonic()))
                async with AsyncSession(engine) as session, session.begin():
                    await outbox.enqueue(session, outboxed.s(n))
                committed[n] = time.time()
            try:
                await asyncio.wait_for(all_started.wait(), timeout=60)
            except TimeoutError:
                pass  # said below, with how many started
    finally:
        await app.close()
        await engine.dispose()
    if len(started) != sizes.jobs:
        raise RuntimeError(f"{len(started)} of {sizes.jobs} jobs started")
    return [started[n] - committed[n] for n in range(sizes.jobs)]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(lags: list[float], sizes: Sizes, version: str) -> str:
    ms = [lag * 1000 for lag in lags]
    return "\n".join([
        f"{sizes.jobs:,} jobs a run, one committed at a time at {sizes.rate:,.0f}/s, "
        f"{sizes.runs} run(s); the relay in the worker (batches of {RELAY_BATCH}, a pass "
        f"every {RELAY_INTERVAL:g} s when the last found fewer), SQLite.",
        "",
        "| commit → job start | p50 | p99 | max | mean |",
        "|---|---:|---:|---:|---:|",
        f"| ms | {percentile(ms, 0.5):,.1f} | {percentile(ms, 0.99):,.1f} | {max(ms):,.1f} | "
        f"{statistics.mean(ms):,.1f} |",
        "",
        f"Server: {version}, private, no persistence.",
    ])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--json", help="also write the raw figures here")
    return parser.parse_args()


def main() -> int:
    import redis

    from tests.servers import ServerProcess

    args = parse_args()
    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    server = ServerProcess().start()
    lags: list[float] = []
    try:
        version = f"Redis {redis.Redis(port=server.port).info('server')['redis_version']}"
        for run in range(1, sizes.runs + 1):
            log(f"run {run}/{sizes.runs} ...")
            lags += asyncio.run(one_run(server.url, sizes))
    finally:
        server.cleanup()
    if args.json:
        Path(args.json).write_text(json.dumps({"sizes": dataclasses.asdict(sizes),
                                               "lags": lags}))
    print(report(lags, sizes, version))
    return 0


if __name__ == "__main__":
    sys.exit(main())


