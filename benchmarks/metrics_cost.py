#!/usr/bin/env python3
"""Metrics row of ``make bench``: what a worker's Prometheus metrics (``metrics_port``)
cost in no-op throughput (the issue's target: at most 10 %), and what the jobs' status
records cost (``track_jobs``, on by default: one Redis key per job) in no-op throughput
and in bulk enqueue.

    .venv/bin/python benchmarks/metrics_cost.py [--quick] [--runs R] [--json PATH]

Runs with the project's venv (``benchmarks/run.py`` calls it for its ``metrics``
scenario): the standard library, the project's package (with the ``metrics`` extra,
uvloop) and the tests' server harness (a private ``redis-server``, no persistence).

Why this measurement: with metrics on, every run is reported to ``WorkerMetrics.finished``
on the event loop (a dict lookup, a counter increment, two histogram observations, each
under a lock), and the scrapes render every series in the server's thread, competing
for the GIL. A no-op job is where that share is largest: any real job's own work
dilutes it.

After an untimed warm-up pass, each run measures three sides back to back on the same
server — the defaults (``off``), metrics on (``on``), status records off
(``untracked``) — in an order rotating from run to run, so that a drift of the machine
does not favour one side:
``N`` no-op jobs queued first with ``enqueue_many``, then one worker process (embedded
``App.worker()`` on uvloop, concurrency 10, like the other no-op rows) runs them;
jobs/s from the first job's start to the last's, and the worker's CPU per job
(``getrusage``, all its threads); the prefill's own rate is the bulk enqueue figure.
While metrics are on, the driver scrapes ``/metrics`` every ``SCRAPE_INTERVAL`` (far
more often than Prometheus' default 15 s: the cost of scraping is in the figure), and
checks at the end that the worker counted every job. Reported: each side's median, and
the median of the runs' ratios (metrics on ÷ off; records on ÷ off).

Internal: ``metrics_cost.py worker --redis-url URL [--metrics-port P] [--untracked]`` is
one worker process (JSON lines on stdout: ``ready``, then, after ``go`` on stdin and SIGTERM,
``result``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Final

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # `python benchmarks/metrics_cost.py` puts benchmarks/ first
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402  (after the path fix: tests/ is imported from ROOT)

from cogworker_async import App  # noqa: E402
from cogworker_async.redis.keys import Keys  # noqa: E402

NAMESPACE: Final = "bench"
QUEUE: Final = "default"
NOOP: Final = "bench.noop"
CONCURRENCY: Final = 10
"""The worker's concurrency (as in the other no-op rows of ``make bench``)."""
CHUNK: Final = 1000
"""Jobs per ``enqueue_many`` call of the prefill."""
SCRAPE_INTERVAL: Final = 0.5
"""Seconds between the driver's scrapes of a worker with metrics on (30 times
Prometheus' default rate: a run of a few seconds still sees several)."""
WARMUP_N: Final = 2000
"""No-op jobs of an untimed first pass (metrics off): the first worker on a fresh server
ran markedly slower than every later one, whichever side it measured."""
SCRAPE_TIMEOUT: Final = 10.0
POLL: Final = 0.025
"""Seconds between the driver's checks for "all done"."""
TARGET: Final = 0.90
"""Metrics on must keep at least this share of the no-op throughput (the issue: ≤ 10 %)."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    runs: int
    noop_n: int
    noop_cap: float
    """Seconds the processing may take before the run is abandoned (an error)."""


FULL: Final = Sizes(runs=7, noop_n=40_000, noop_cap=120)
QUICK: Final = Sizes(runs=3, noop_n=10_000, noop_cap=60)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- one worker process --------------------------------------------------------------

def worker_main(args: argparse.Namespace) -> None:
    """Build the App, say ``ready``, wait for ``go`` on stdin, run the embedded worker
    until SIGTERM, then say ``result``: jobs run, first and last start, CPU seconds."""
    import uvloop

    app = App(args.redis_url, namespace=NAMESPACE, concurrency=CONCURRENCY,
              metrics_port=args.metrics_port, track_jobs=not args.untracked)
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


async def work(app: App, seen: dict[str, Any]) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    began = cpu_seconds()
    async with app.worker():
        await stop.wait()
    seen["cpu"] = cpu_seconds() - began
    await app.close()
    emit("result", **seen)


def worker_argv(url: str, metrics_port: int | None, tracked: bool) -> list[str]:
    """The command line of this script's ``worker`` command."""
    argv = [sys.executable, str(Path(__file__).resolve()), "worker", "--redis-url", url]
    if metrics_port is not None:
        argv += ["--metrics-port", str(metrics_port)]
    if not tracked:
        argv.append("--untracked")
    return argv


class Worker:
    """One worker process (a script's ``worker`` command, e.g. ``worker_argv``'s; the
    flow row's too), stopped by its pid."""

    def __init__(self, argv: list[str]) -> None:
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, bufsize=1, cwd=ROOT)

    def expect(self, event: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):
                message: dict[str, Any] = json.loads(line)
                if message.get("event") == event:
                    return message
        raise RuntimeError(f"worker {self.process.pid} exited before {event!r}")

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def stop(self) -> dict[str, Any]:
        self.process.send_signal(signal.SIGTERM)
        return self.expect("result")

    def finish(self) -> None:
        """Wait for the process to exit; kill it (by its pid) if it does not."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


# -- the measurement -----------------------------------------------------------------

async def prefill(url: str, n: int, tracked: bool) -> float:
    """Enqueue ``n`` no-op jobs in chunks; the seconds it took."""
    app = App(url, namespace=NAMESPACE, track_jobs=tracked)

    async def noop(ts: float) -> None:
        """The driver's registration of the job (it only enqueues)."""

    job = app.job(name=NOOP, retry=False)(noop)
    try:
        await job.enqueue_many([((time.time(),), {})])  # connected, scripts loaded
        began = time.perf_counter()
        for start in range(1, n, CHUNK):
            now = time.time()
            await job.enqueue_many([((now,), {})] * min(CHUNK, n - start))
        return time.perf_counter() - began
    finally:
        await app.close()


def left(client: redis.Redis) -> int:
    """Jobs still queued or in progress: the queue's length and each in-progress list of
    the processes registered in its slot (a worker registers before it fetches). No SCAN:
    with status records on, the keyspace holds a key per job, and a SCAN of it every
    ``POLL`` took more of Redis' time than the worker's own scripts (143 µs per job
    against 39), which the records' cost then wrongly included."""
    keys = Keys(NAMESPACE)
    count = int(client.llen(keys.queue(QUEUE)))
    for identity in client.smembers(keys.queue_identities(QUEUE)):
        count += int(client.llen(keys.in_progress(QUEUE, identity.decode())))
    return count


def counted(port: int) -> float:
    """The sum of ``cogworker_jobs_total`` a scrape of the worker shows."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                timeout=SCRAPE_TIMEOUT) as response:
        text = response.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == "cogworker_jobs_total")


def processing(url: str, client: redis.Redis, metrics_port: int | None,
               sizes: Sizes, tracked: bool = True) -> dict[str, Any]:
    """Prefill, run one worker over the jobs (scraping it if metrics are on)."""
    import uvloop

    client.flushall()
    worker = Worker(worker_argv(url, metrics_port, tracked))
    try:
        worker.expect("ready")  # its imports done: they would compete with the prefill
        filled = uvloop.run(prefill(url, sizes.noop_n, tracked))
        worker.go()
        began = next_scrape = time.monotonic()
        scrapes = 0
        while left(client):
            if worker.process.poll() is not None:
                raise RuntimeError("the worker exited early")
            now = time.monotonic()
            if now - began > sizes.noop_cap:
                raise RuntimeError(f"not done within {sizes.noop_cap:.0f}s")
            if metrics_port is not None and now >= next_scrape:
                with contextlib.suppress(OSError):  # not listening yet: the next one
                    counted(metrics_port)
                    scrapes += 1
                next_scrape = now + SCRAPE_INTERVAL
            time.sleep(POLL)
        total = counted(metrics_port) if metrics_port is not None else None
        result = worker.stop()
    finally:
        worker.finish()
    done = int(result["n"])
    if done != sizes.noop_n:
        raise RuntimeError(f"{done} of {sizes.noop_n} jobs ran")
    if total is not None and total != done:
        raise RuntimeError(f"the metrics counted {total} runs of {done}")
    wall = result["last"] - result["first"]
    return {"rate": done / wall if wall > 0 else 0.0,
            "cpu_us": 1e6 * result["cpu"] / done, "scrapes": scrapes,
            "bulk_rate": (sizes.noop_n - 1) / filled if filled > 0 else 0.0}


SIDES: Final = ("off", "on", "untracked")
"""The defaults; metrics on; status records off (``track_jobs=False``)."""


def summarize(runs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {side: {} for side in SIDES}
    out["ratio"], out["records"] = {}, {}
    for key in ("rate", "cpu_us", "bulk_rate"):
        for side in SIDES:
            out[side][key] = statistics.median(run[side][key] for run in runs)
        out["ratio"][key] = statistics.median(
            run["on"][key] / run["off"][key] if run["off"][key] else math.nan for run in runs)
        out["records"][key] = statistics.median(
            run["off"][key] / run["untracked"][key] if run["untracked"][key] else math.nan
            for run in runs)
    out["ratios"] = [run["on"]["rate"] / run["off"]["rate"] for run in runs]
    out["scrapes"] = sum(run["on"]["scrapes"] for run in runs)
    return out


def report(result: dict[str, Any], sizes: Sizes, version: str) -> str:
    rate, cpu = result["ratio"]["rate"], result["ratio"]["cpu_us"]
    records = result["records"]
    met = "yes" if rate >= TARGET else "**no**"
    each = ", ".join(f"{r:.3f}" for r in result["ratios"])
    return "\n".join([
        f"{sizes.noop_n:,} no-op jobs queued first, one worker (concurrency "
        f"{CONCURRENCY}); metrics off and on back to back in each of {sizes.runs} run(s), "
        f"order alternating; with metrics on, `/metrics` scraped every "
        f"{SCRAPE_INTERVAL:g} s ({result['scrapes']} scrapes in all). Medians; × = the "
        "median of the runs' on ÷ off.",
        "",
        "| no-op processing, 1 worker × 10 | metrics off | metrics on | × |",
        "|---|---:|---:|---:|",
        f"| jobs/s | {result['off']['rate']:,.0f} | {result['on']['rate']:,.0f} | "
        f"{rate:.3f} |",
        f"| worker CPU per job (µs) | {result['off']['cpu_us']:.1f} | "
        f"{result['on']['cpu_us']:.1f} | {cpu:.3f} |",
        f"| target: metrics on cost ≤ 10 % of throughput (× ≥ {TARGET:.2f}) | | | "
        f"{met} |",
        "",
        f"Each run's jobs/s ratio: {each}. Server: {version}, private, no persistence.",
        "",
        "What the jobs' status records cost (`track_jobs`, on by default; × = the "
        "median of the runs' on ÷ off):",
        "",
        "| status records | off (`track_jobs=False`) | on (default) | × |",
        "|---|---:|---:|---:|",
        f"| no-op processing, jobs/s | {result['untracked']['rate']:,.0f} | "
        f"{result['off']['rate']:,.0f} | {records['rate']:.3f} |",
        f"| worker CPU per job (µs) | {result['untracked']['cpu_us']:.1f} | "
        f"{result['off']['cpu_us']:.1f} | {records['cpu_us']:.3f} |",
        f"| bulk enqueue (`enqueue_many` of {CHUNK:,}), jobs/s | "
        f"{result['untracked']['bulk_rate']:,.0f} | {result['off']['bulk_rate']:,.0f} | "
        f"{records['bulk_rate']:.3f} |",
    ])


# -- main ----------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    worker = sub.add_parser("worker", help="(internal) one worker process")
    worker.add_argument("--redis-url", required=True)
    worker.add_argument("--metrics-port", type=int, default=None)
    worker.add_argument("--untracked", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small N, 3 runs (about a minute)")
    parser.add_argument("--runs", type=int, help="runs, median reported (7; --quick 3)")
    parser.add_argument("--json", help="also write the raw figures here")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.command == "worker":
        worker_main(args)
        return 0
    from tests.servers import ServerProcess, free_port

    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the server is stopped
    server = ServerProcess().start()
    client = redis.Redis(port=server.port, socket_timeout=30)
    runs: list[dict[str, dict[str, Any]]] = []
    try:
        info = client.info("server")
        version = f"Redis {info['redis_version']}"
        log(f"warm-up: {WARMUP_N:,} jobs, metrics off (not counted) ...")
        processing(server.url, client, None, dataclasses.replace(sizes, noop_n=WARMUP_N))
        for run in range(1, sizes.runs + 1):
            shift = run % len(SIDES)
            sides = SIDES[shift:] + SIDES[:shift]
            pair: dict[str, dict[str, Any]] = {}
            for side in sides:
                log(f"run {run}/{sizes.runs}: {side} ...")
                port = free_port() if side == "on" else None
                pair[side] = processing(server.url, client, port, sizes,
                                        tracked=side != "untracked")
                log("  " + ", ".join(f"{k} {v:,.1f}" for k, v in pair[side].items()))
            runs.append(pair)
    finally:
        client.close()
        server.cleanup()
    result = summarize(runs)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": vars(args), "sizes": dataclasses.asdict(sizes), "version": version,
             "runs": runs, "result": result}, indent=1))
    print(report(result, sizes, version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
