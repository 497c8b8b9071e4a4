#!/usr/bin/env python3
"""Who-runs-next row of ``make bench``: what priorities and fair groups cost a job, in
no-op throughput, in the worker's CPU and in Redis' CPU, against the same jobs without
them.

    .venv/bin/python benchmarks/ordering_cost.py [--quick] [--runs R] [--sides a,b]
                                                 [--json PATH]

Runs with the project's venv (``benchmarks/run.py`` calls it for its ``ordering``
scenario) on a private ``redis-server``, with ``flow_cost.py``'s measurement: after an
untimed warm-up, each run measures every side back to back on the same server, in an
order rotating from run to run; ``N`` no-op jobs queued first with ``enqueue_many``,
then one worker process (embedded ``App.worker()`` on uvloop, concurrency 10) runs
them. Reported: each side's median, and the median of the runs' ratios against ``plain``.

The sides:

- ``plain``: every job of priority 0 (the defaults): the cost of a queue that uses
  none of this, which must be none;
- ``priorities``: the jobs spread over three priorities (5, 0, -5, in turn), the
  default aging (each fetch compares the heads of three lists, decoding each head's
  ``enqueued_at``);
- ``strict``: the same jobs with ``priority_aging=None`` (compares priorities only);
- ``groups``: the jobs spread over ``GROUPS`` fair groups, all with jobs waiting from
  start to end (each fetch takes the ring's first group and sends it to the back).

Internal: ``ordering_cost.py worker --redis-url URL --side SIDE`` is one worker process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Final

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # `python benchmarks/ordering_cost.py` puts benchmarks/ first
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402  (after the path fix: tests/ is imported from ROOT)

from benchmarks.flow_cost import (  # noqa: E402
    FULL,
    QUICK,
    each_run,
    measure,
    redis_cpu,
    side_rows,
    summarize,
)
from benchmarks.metrics_cost import (  # noqa: E402
    CHUNK,
    CONCURRENCY,
    NAMESPACE,
    NOOP,
    POLL,
    QUEUE,
    Sizes,
    Worker,
    emit,
    work,
)
from cogworker_async import App  # noqa: E402
from cogworker_async.jobs.priority import LEVELS  # noqa: E402
from cogworker_async.redis.keys import Keys  # noqa: E402

PRIORITIES: Final = (5, 0, -5)
"""The priorities the ``priorities`` and ``strict`` sides spread their jobs over."""
GROUPS: Final = 100
"""Fair groups of the ``groups`` side, every one with jobs waiting all along."""
GROUP_CHUNK: Final = 100
"""Jobs per ``enqueue_many`` of the ``groups`` side (each call one group's)."""
SIDES: Final = ("plain", "priorities", "strict", "groups")
BASE: Final = "plain"
WHAT: Final = {
    "plain": "defaults (every job priority 0)",
    "priorities": f"jobs at priorities {', '.join(map(str, PRIORITIES))}, default aging",
    "strict": f"jobs at priorities {', '.join(map(str, PRIORITIES))}, "
              "`priority_aging=None`",
    "groups": f"jobs in {GROUPS} fair groups (`options(group=...)`)",
}


def settings(side: str) -> dict[str, Any]:
    return {"priority_aging": None} if side == "strict" else {}


def options(side: str, index: int) -> dict[str, Any]:
    """The enqueue options of the ``index``-th chunk of jobs on ``side``."""
    if side == "plain":
        return {}
    if side == "groups":
        return {"group": f"tenant-{index % GROUPS}"}
    return {"priority": PRIORITIES[index % len(PRIORITIES)]}


# -- one worker process --------------------------------------------------------------

def worker_main(args: argparse.Namespace) -> None:
    import uvloop

    app = App(args.redis_url, namespace=NAMESPACE, concurrency=CONCURRENCY,
              **settings(args.side))
    seen: dict[str, Any] = {"n": 0, "first": None, "last": None}

    @app.job(name=NOOP, retry=False)
    async def noop(ts: float) -> None:
        now = time.time()
        seen["first"] = seen["first"] or now
        seen["last"] = now
        seen["n"] += 1

    emit("ready")
    if sys.stdin.readline().strip() != "go":
        return
    uvloop.run(work(app, seen))
    sys.stdout.flush()
    os._exit(0)  # don't wait on libraries' leftover threads (each already stopped)


# -- the measurement -----------------------------------------------------------------

async def prefill(url: str, n: int, side: str) -> None:
    """Enqueue ``n`` no-op jobs in chunks, each chunk with the side's options."""
    app = App(url, namespace=NAMESPACE)

    async def noop(ts: float) -> None:
        """The driver's registration of the job (it only enqueues)."""

    job = app.job(name=NOOP, retry=False)(noop)
    chunk = GROUP_CHUNK if side == "groups" else CHUNK
    try:
        for index, start in enumerate(range(0, n, chunk)):
            await job.options(**options(side, index)).enqueue_many(
                [((time.time(),), {})] * min(chunk, n - start))
    finally:
        await app.close()


def waiting(client: redis.Redis) -> tuple[int, int]:
    """(queued on every priority's list or in a group, in progress) of the queue."""
    keys = Keys(NAMESPACE)
    identities = client.smembers(keys.queue_identities(QUEUE))
    with client.pipeline(transaction=False) as pipe:
        for level in LEVELS:
            pipe.llen(keys.priority_level(QUEUE, level))
        pipe.zcard(keys.groups(QUEUE))  # a group in the ring has jobs waiting
        for identity in identities:
            pipe.llen(keys.in_progress(QUEUE, identity.decode()))
        counts = [int(n) for n in pipe.execute()]
    return sum(counts[:len(LEVELS) + 1]), sum(counts[len(LEVELS) + 1:])


def processing(url: str, client: redis.Redis, side: str, sizes: Sizes) -> dict[str, Any]:
    """Prefill, run one worker of ``side`` over the jobs; its figures."""
    import uvloop

    client.flushall()
    worker = Worker([sys.executable, str(Path(__file__).resolve()), "worker",
                     "--redis-url", url, "--side", side])
    try:
        worker.expect("ready")
        uvloop.run(prefill(url, sizes.noop_n, side))
        redis_began = redis_cpu(client)
        worker.go()
        began = time.monotonic()
        while waiting(client) != (0, 0):
            if worker.process.poll() is not None:
                raise RuntimeError("the worker exited early")
            if time.monotonic() - began > sizes.noop_cap:
                raise RuntimeError(f"not done within {sizes.noop_cap:.0f}s")
            time.sleep(POLL)
        redis_used = redis_cpu(client) - redis_began
        result = worker.stop()
    finally:
        worker.finish()
    done = int(result["n"])
    if done != sizes.noop_n:
        raise RuntimeError(f"{done} of {sizes.noop_n} jobs ran")
    wall = result["last"] - result["first"]
    return {"rate": done / wall if wall > 0 else 0.0,
            "cpu_us": 1e6 * result["cpu"] / done, "redis_us": 1e6 * redis_used / done}


def report(result: dict[str, Any], sides: list[str], sizes: Sizes, version: str) -> str:
    return "\n".join([
        f"{sizes.noop_n:,} no-op jobs queued first, one worker (concurrency "
        f"{CONCURRENCY}); the sides back to back in each of {sizes.runs} run(s), order "
        "rotating. Medians; × = the median of the runs' side ÷ plain (jobs/s: below 1 "
        "is slower; CPU: above 1 is dearer).",
        "",
        *side_rows(result, sides, WHAT),
        "",
        each_run(result, sides) + f"Server: {version}, private, no persistence.",
    ])


# -- main ----------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    worker = sub.add_parser("worker", help="(internal) one worker process")
    worker.add_argument("--redis-url", required=True)
    worker.add_argument("--side", choices=SIDES, required=True)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.noop_n:,} jobs, {QUICK.runs} runs")
    parser.add_argument("--runs", type=int,
                        help=f"runs, median reported ({FULL.runs}; --quick {QUICK.runs})")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help=f"comma-separated, from {', '.join(SIDES)} ({BASE} is "
                             "always measured)")
    parser.add_argument("--json", help="also write the raw figures here")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.command == "worker":
        worker_main(args)
        return 0
    from tests.servers import ServerProcess

    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    asked = {side for side in args.sides.split(",") if side}
    if asked - set(SIDES):
        raise SystemExit(f"unknown sides: {', '.join(sorted(asked - set(SIDES)))}")
    sides = [side for side in SIDES if side == BASE or side in asked]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the server is stopped
    server = ServerProcess().start()
    client = redis.Redis(port=server.port, socket_timeout=30)
    try:
        version = f"Redis {client.info('server')['redis_version']}"
        runs = measure(processing, server.url, client, sides, sizes)
    finally:
        client.close()
        server.cleanup()
    result = summarize(runs, sides)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": vars(args), "sizes": dataclasses.asdict(sizes), "version": version,
             "sides": sides, "runs": runs, "result": result}, indent=1))
    print(report(result, sides, sizes, version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
