#!/usr/bin/env python3
"""Flow-control row of ``make bench``: what a queue limit (``queue_limits``) and a
limiter (``App.limiter``, one per kind) cost a job, in no-op throughput, in the worker's
CPU and in Redis' CPU.

    .venv/bin/python benchmarks/flow_cost.py [--quick] [--runs R] [--sides a,b]
                                             [--json PATH]

Runs with the project's venv (``benchmarks/run.py`` calls it for its ``flow`` scenario):
the standard library, the project's package (uvloop) and the tests' server harness (a
private ``redis-server``, no persistence). It reuses ``metrics_cost.py``'s worker
process handling, prefill and sizes of measurement.

Why these measurements: flow control is paid on every job, and a no-op job is where
that share is largest (any real job's own work dilutes it):

- ``queue_limits``: the fetch script counts the queue's running jobs before it takes
  any, one ``LLEN`` per process registered in the queue's slot. The limit here
  (``LIMIT``) never binds: what is measured is the counting. Every side has the same
  fleet registered (``FLEET`` other identities, alive, one job on each in-progress list,
  as other processes of a deployment would have), so that the count walks 9 lists, not
  1; without a limit nothing reads them.
- a limiter: each job's body does ``async with limiter:``, one script call (and a
  release for ``concurrent``) per job, each on the job's own path. Capacities that never
  bind, so a job never waits: what is measured is asking.

After an untimed warm-up pass, each run measures every side back to back on the same
server, in an order rotating from run to run (a drift of the machine favours no side):
``N`` no-op jobs queued first with ``enqueue_many``, then one worker process (embedded
``App.worker()`` on uvloop, concurrency 10, like the other no-op rows) runs them;
jobs/s from the first job's start to the last's, the worker's CPU per job
(``getrusage``, all its threads) and Redis' CPU per job (``INFO cpu``, from the worker's
``go`` to the last ack; the driver's polls are in it, the prefill is not). Reported:
each side's median, and the median of the runs' ratios against ``plain``.

The limiter sides need ``App.limiter``; on a tree without it they are skipped, and the
report says so.

Internal: ``flow_cost.py worker --redis-url URL --side SIDE`` is one worker process
(JSON lines on stdout: ``ready``, then, after ``go`` on stdin and SIGTERM, ``result``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # `python benchmarks/flow_cost.py` puts benchmarks/ first
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402  (after the path fix: tests/ is imported from ROOT)

from benchmarks.metrics_cost import (  # noqa: E402
    CONCURRENCY,
    NAMESPACE,
    NOOP,
    POLL,
    QUEUE,
    WARMUP_N,
    Sizes,
    Worker,
    emit,
    left,
    log,
    prefill,
    work,
)
from cogworker_async import App  # noqa: E402
from cogworker_async.redis.keys import Keys  # noqa: E402

LIMIT: Final = 1000
"""``queue_limits`` of the ``queue_limits`` side: far above the worker's concurrency,
so it never binds."""
FLEET: Final = 8
"""Other process identities registered in the queue's slot on every side."""
FLEET_TTL: Final = 3600
"""Seconds the fleet's alive markers live (longer than any run): recovery must find
them alive, or it would take their lists and forget them mid-run."""
PLACEHOLDER: Final = "bench-fleet-running"
"""The one entry of each fleet identity's in-progress list (never run: never taken)."""

RATE: Final = (1_000_000, 60)
"""(N, seconds) of the window and bucket limiters: the largest N a limiter takes
(``limiter.MAX_CAPACITY``). It never binds: a pass runs at most ``FULL.noop_n`` jobs on a
flushed server (a new window, a full bucket), far fewer than N."""
LIMITERS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "limiter_concurrent": ("bench", {"concurrent": 1000}),
    "limiter_window": ("bench-w", {"per_window": RATE}),
    "limiter_bucket": ("bench-b", {"bucket": RATE}),
}
"""Side -> the limiter each job enters: its name, and a capacity that never binds (1,000
at once, for 10 processors; ``RATE``)."""
SIDES: Final = ("plain", "queue_limits", *LIMITERS)
BASE: Final = "plain"


def _spelled(value: object) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_spelled(part) for part in value) + ")"
    return f"{value:_}" if isinstance(value, int) else repr(value)


WHAT: Final = {
    "plain": "defaults",
    "queue_limits": f'`queue_limits={{"{QUEUE}": {LIMIT}}}`',
    **{side: f'`async with app.limiter("{name}", '
             + ", ".join(f"{key}={_spelled(value)}" for key, value in capacity.items()) + ")`"
       for side, (name, capacity) in LIMITERS.items()},
}
"""Each side's setting, as the report shows it."""

FULL: Final = Sizes(runs=7, noop_n=40_000, noop_cap=120)
QUICK: Final = Sizes(runs=3, noop_n=20_000, noop_cap=60)


def limiter_available() -> bool:
    """Whether this tree has ``App.limiter`` (built alongside this row)."""
    return callable(getattr(App, "limiter", None))


# -- one worker process --------------------------------------------------------------

def worker_main(args: argparse.Namespace) -> None:
    """Build the side's App, say ``ready``, wait for ``go`` on stdin, run the embedded
    worker until SIGTERM, then say ``result``: jobs run, first and last start, CPU
    seconds."""
    import uvloop

    limits = {QUEUE: LIMIT} if args.side == "queue_limits" else {}
    app = App(args.redis_url, namespace=NAMESPACE, concurrency=CONCURRENCY,
              queue_limits=limits)
    seen: dict[str, Any] = {"n": 0, "first": None, "last": None}

    def started() -> None:
        now = time.time()
        seen["first"] = seen["first"] or now
        seen["last"] = now
        seen["n"] += 1

    if args.side in LIMITERS:
        name, capacity = LIMITERS[args.side]
        limiter = app.limiter(name, **capacity)

        @app.job(name=NOOP, retry=False)
        async def limited(ts: float) -> None:
            started()
            async with limiter:
                pass
    else:
        @app.job(name=NOOP, retry=False)
        async def noop(ts: float) -> None:
            started()

    emit("ready")
    if sys.stdin.readline().strip() != "go":
        return
    uvloop.run(work(app, seen))
    sys.stdout.flush()
    os._exit(0)  # don't wait on libraries' leftover threads (each already stopped)


# -- the measurement -----------------------------------------------------------------

def register_fleet(client: redis.Redis) -> int:
    """Register ``FLEET`` other live processes in the queue's slot, each with one job on
    its in-progress list, as a beat would; the entries added."""
    keys = Keys(NAMESPACE)
    with client.pipeline(transaction=False) as pipe:
        for index in range(FLEET):
            identity = f"bench-fleet-{index}"
            pipe.sadd(keys.queue_identities(QUEUE), identity)
            pipe.set(keys.process(identity), "{}", ex=FLEET_TTL)
            pipe.set(keys.queue_process(QUEUE, identity), "1", ex=FLEET_TTL)
            pipe.rpush(keys.in_progress(QUEUE, identity), PLACEHOLDER)
        pipe.execute()
    return FLEET


def running(client: redis.Redis) -> tuple[int, int, int]:
    """(queued, in progress, registered processes) of the queue, from the lists of the
    processes registered in its slot: a few commands, where ``left``'s SCAN of the
    keyspace (a status record per job) would load Redis during the measurement."""
    keys = Keys(NAMESPACE)
    identities = client.smembers(keys.queue_identities(QUEUE))
    with client.pipeline(transaction=False) as pipe:
        pipe.llen(keys.queue(QUEUE))
        for identity in identities:
            name = identity.decode() if isinstance(identity, bytes) else identity
            pipe.llen(keys.in_progress(QUEUE, name))
        queued, *lists = pipe.execute()
    return int(queued), sum(int(n) for n in lists), len(identities)


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def processing(url: str, client: redis.Redis, side: str, sizes: Sizes) -> dict[str, Any]:
    """Prefill, run one worker of ``side`` over the jobs; its figures."""
    import uvloop

    client.flushall()
    fleet = register_fleet(client)
    worker = Worker([sys.executable, str(Path(__file__).resolve()), "worker",
                     "--redis-url", url, "--side", side])
    try:
        worker.expect("ready")  # its imports done: they would compete with the prefill
        uvloop.run(prefill(url, sizes.noop_n, True))
        redis_began = redis_cpu(client)
        worker.go()
        began = time.monotonic()
        # Done when the queue is empty and nothing but the fleet's entries is in progress
        # (the worker registered: before its first beat its list would not be counted).
        while running(client) != (0, fleet, fleet + 1):
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
    if left(client) != fleet:  # every list, registered or not (a SCAN: after the clock)
        raise RuntimeError("jobs left, or the fleet's in-progress lists touched")
    if side in LIMITERS and client.zcard(Keys(NAMESPACE).limiter(LIMITERS[side][0],
                                                                 "holders")):
        raise RuntimeError("slots of the concurrent limiter still held after every job")
    wall = result["last"] - result["first"]
    return {"rate": done / wall if wall > 0 else 0.0,
            "cpu_us": 1e6 * result["cpu"] / done, "redis_us": 1e6 * redis_used / done}


KEYS: Final = ("rate", "cpu_us", "redis_us")


def summarize(runs: list[dict[str, dict[str, Any]]], sides: list[str]) -> dict[str, Any]:
    """Each side's medians, and the median of the runs' side ÷ plain."""
    out: dict[str, Any] = {side: {} for side in sides}
    out["ratio"] = {side: {} for side in sides}
    out["ratios"] = {}
    for side in sides:
        for key in KEYS:
            out[side][key] = statistics.median(run[side][key] for run in runs)
            out["ratio"][side][key] = statistics.median(
                run[side][key] / run[BASE][key] if run[BASE][key] else math.nan
                for run in runs)
        out["ratios"][side] = [run[side]["rate"] / run[BASE]["rate"] for run in runs]
    return out


def side_rows(result: dict[str, Any], sides: list[str], what: dict[str, str]) -> list[str]:
    """The table of sides (``summarize``'s result), its header first: also the ordering
    row's (``ordering_cost.py``)."""
    rows = ["| side | what | jobs/s | × | worker CPU/job (µs) | × | Redis CPU/job (µs) | × |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    for side in sides:
        figures, ratio = result[side], result["ratio"][side]
        rows.append(
            f"| {side} | {what[side]} | {figures['rate']:,.0f} | {ratio['rate']:.3f} | "
            f"{figures['cpu_us']:.1f} | {ratio['cpu_us']:.3f} | {figures['redis_us']:.1f} | "
            f"{ratio['redis_us']:.3f} |")
    return rows


def each_run(result: dict[str, Any], sides: list[str]) -> str:
    """Each run's jobs/s ratio of every side but the base, as the report's last line says."""
    each = "; ".join(f"{side} " + ", ".join(f"{r:.3f}" for r in result["ratios"][side])
                     for side in sides if side != BASE)
    return f"Each run's jobs/s ratio: {each}. " if each else ""


def report(result: dict[str, Any], sides: list[str], sizes: Sizes, version: str,
           skipped: str) -> str:
    return "\n".join([
        f"{sizes.noop_n:,} no-op jobs queued first, one worker (concurrency "
        f"{CONCURRENCY}); the sides back to back in each of {sizes.runs} run(s), order "
        "rotating. Medians; × = the median of the runs' side ÷ plain (jobs/s: below 1 "
        "is slower; CPU: above 1 is dearer).",
        "",
        f"On every side {FLEET} other live process identities are registered in the "
        "queue's slot, each with one job on its in-progress list, as a fleet would have: "
        f"with `queue_limits` each fetch reads one `LLEN` per registered process "
        f"({FLEET + 1} here, the worker's own included). The limit ({LIMIT:,}) and the "
        "limiters' capacities never bind: the figures are the cost of counting and of "
        "asking, never of waiting.",
        "",
        *side_rows(result, sides, WHAT),
        "",
        each_run(result, sides) + f"Server: {version}, private, no persistence.",
        *(["", skipped] if skipped else []),
    ])


# -- main ----------------------------------------------------------------------------

Processing = Callable[[str, redis.Redis, str, Sizes], dict[str, Any]]
"""One side's measurement: (server URL, its client, side, sizes) -> its figures."""


def measure(processing: Processing, url: str, client: redis.Redis, sides: list[str],
            sizes: Sizes) -> list[dict[str, dict[str, Any]]]:
    """An untimed warm-up of the base side, then ``sizes.runs`` runs of every side back
    to back, in an order rotating from run to run (a drift of the machine favours no
    side): each run's figures per side. Also the ordering row's (``ordering_cost.py``)."""
    log(f"warm-up: {WARMUP_N:,} jobs, {BASE} (not counted) ...")
    processing(url, client, BASE, dataclasses.replace(sizes, noop_n=WARMUP_N))
    runs: list[dict[str, dict[str, Any]]] = []
    for run in range(1, sizes.runs + 1):
        shift = run % len(sides)
        figures: dict[str, dict[str, Any]] = {}
        for side in sides[shift:] + sides[:shift]:
            log(f"run {run}/{sizes.runs}: {side} ...")
            figures[side] = processing(url, client, side, sizes)
            log("  " + ", ".join(f"{k} {v:,.1f}" for k, v in figures[side].items()))
        runs.append(figures)
    return runs


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    worker = sub.add_parser("worker", help="(internal) one worker process")
    worker.add_argument("--redis-url", required=True)
    worker.add_argument("--side", choices=SIDES, required=True)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.noop_n:,} jobs, {QUICK.runs} runs (about a minute)")
    parser.add_argument("--runs", type=int,
                        help=f"runs, median reported ({FULL.runs}; --quick {QUICK.runs})")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help=f"comma-separated, from {', '.join(SIDES)} ({BASE} is "
                             "always measured)")
    parser.add_argument("--json", help="also write the raw figures here")
    return parser.parse_args()


def chosen_sides(args: argparse.Namespace) -> tuple[list[str], str]:
    """The sides to measure (``plain`` first, always), and the note on any skipped."""
    asked = {side for side in args.sides.split(",") if side}
    unknown = asked - set(SIDES)
    if unknown:
        raise SystemExit(f"unknown sides: {', '.join(sorted(unknown))}")
    sides = [side for side in SIDES if side == BASE or side in asked]
    missing = [side for side in sides if side in LIMITERS]
    if missing and not limiter_available():
        sides = [side for side in sides if side not in LIMITERS]
        return sides, (f"Skipped: {', '.join(missing)} — limiter not available "
                       "(this tree's `App` has no `limiter`).")
    return sides, ""


def main() -> int:
    args = parse_args()
    if args.command == "worker":
        worker_main(args)
        return 0
    from tests.servers import ServerProcess

    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    sides, skipped = chosen_sides(args)
    if skipped:
        log(skipped)
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
             "sides": sides, "skipped": skipped, "runs": runs, "result": result}, indent=1))
    print(report(result, sides, sizes, version, skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
