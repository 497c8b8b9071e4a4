#!/usr/bin/env python3
"""Durability rows of ``make bench``: what ``durability="replica"`` and ``"aof"`` cost.

    .venv/bin/python benchmarks/durability.py [--quick] [--runs R] [--fsync everysec,always]
                                              [--json PATH]

Runs with the project's venv (``benchmarks/run.py`` calls it for its ``durability``
scenario): the standard library, the project's package (redis-py, uvloop) and the tests'
server harness.

Why these measurements: under ``durability`` every enqueue and every settle (ack, file,
give back) is followed, on its connection and in its round trip, by ``WAIT 1 <ms>``
(``"replica"``) or ``WAITAOF 1 0 <ms>`` (``"aof"``), so what it costs is the time Redis
takes to confirm: a replica's acknowledgement (one more loopback round trip from the
master), or the master's next fsync of its append-only file — which, under
``appendfsync everysec``, the server does on its own schedule, not per write. Each
durable mode is measured against ``durability`` off on the very same servers, run by
run, so that the only difference is the wait:

- ``replica``: a master and one replica (``redis-server`` from PATH, else the embedded
  binary; in sync — INFO replication ``slave0`` ``state=online`` — before each
  measurement), both without persistence; ``off`` on the same pair.
- ``aof``: the embedded Valkey (``cogworker_async.redis.embedded.find_binary()``: it has
  ``WAITAOF``; Redis needs >= 7.2) with ``appendonly yes`` and each ``appendfsync``
  policy of ``--fsync`` (default ``everysec``, the server's default, and ``always``);
  ``off`` on the same server.

For each of them, ``off`` then the durable mode, ``--runs`` times:

- enqueue, concurrent: ``N`` single ``await job.enqueue()`` calls from 50 tasks of one
  process (uvloop): jobs/s.
- enqueue, sequential: ``M`` awaited enqueues one after another: each call's latency,
  p50 and p99.
- ``enqueue_many``: the prefill of the next measurement, chunks of 1,000 (one WAIT
  covers a chunk): jobs/s.
- no-op processing: those jobs run by one worker process (embedded ``App.worker()`` on
  uvloop, concurrency 10, like ``benchmarks/cluster.py``'s): jobs/s from the first job's
  start to the last's; a run stopped at the time cap is the rate over the jobs done
  (marked †).
- enqueue → start: with that worker idle, ``P`` jobs enqueued one at a time, 20 ms
  apart (or the enqueue's own time, if longer); latency = the job's start − the time
  just before its ``enqueue`` call (``time.time()`` in both processes). The job is on the
  master's queue before the WAIT returns, so the worker may start it before its enqueue
  returns.

Internal: ``durability.py worker --redis-url URL --durability MODE`` is one worker
process (JSON lines on stdout: ``ready``, then, after ``go`` on stdin and SIGTERM,
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
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # `python benchmarks/durability.py` puts benchmarks/ first
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402  (after the path fix: tests/ is imported from ROOT)

from cogworker_async import App, NotDurable  # noqa: E402
from cogworker_async.redis.keys import Keys  # noqa: E402

NAMESPACE: Final = "bench"
QUEUE: Final = "default"
WARMUP_QUEUE: Final = "warmup"
NOOP: Final = "bench.noop"
PROBE: Final = "bench.probe"
CONCURRENCY: Final = 10
"""The worker's concurrency (as in the other no-op rows of ``make bench``)."""
ENQUEUERS: Final = 50
"""Tasks enqueuing at once in the concurrent enqueue measurement."""
CHUNK: Final = 1000
"""Jobs per ``enqueue_many`` call."""
WARMUP: Final = 5
"""Enqueues before a timed sequence (connection, scripts, queue registration)."""
PROBE_INTERVAL: Final = 0.02
"""Seconds between the starts of two latency probes (at least)."""
POLL: Final = 0.025
"""Seconds between the driver's checks for "all done"."""
SYNC_TIMEOUT: Final = 30.0
"""Seconds a replica may take to be in sync before the run is abandoned."""
DRAIN_TIMEOUT: Final = 60.0
"""Seconds the worker may take to finish what it fetched after a time cap, or to run
the probes."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    runs: int
    enqueue_n: int
    sequential_n: int
    noop_n: int
    noop_cap: float
    """Seconds the processing may take; a run stopped there is the rate of jobs done."""
    probes: int


FULL: Final = Sizes(runs=3, enqueue_n=5000, sequential_n=200, noop_n=10_000, noop_cap=20,
                    probes=100)
QUICK: Final = Sizes(runs=1, enqueue_n=1000, sequential_n=40, noop_n=2000, noop_cap=4,
                     probes=25)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (``share`` in 0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def app_for(url: str, mode: str | None, **options: Any) -> App:
    return App(url, namespace=NAMESPACE, durability=mode, **options)


# -- one worker process --------------------------------------------------------------

def worker_main(args: argparse.Namespace) -> None:
    """Build the App and its jobs, say ``ready``, wait for ``go`` on stdin, run the
    embedded worker until SIGTERM, then say ``result``: no-op jobs run with the first
    and last start stamps, and each probe's enqueue → start latency."""
    import uvloop

    app = app_for(args.redis_url, args.durability or None, concurrency=args.concurrency)
    seen: dict[str, Any] = {"n": 0, "first": None, "last": None, "latencies": []}

    @app.job(name=NOOP, retry=False)
    async def noop(ts: float) -> None:
        now = time.time()
        seen["first"] = seen["first"] or now
        seen["last"] = now
        seen["n"] += 1

    @app.job(name=PROBE, retry=False)
    async def probe(ts: float) -> None:
        seen["latencies"].append(time.time() - ts)

    emit("ready")
    if sys.stdin.readline().strip() != "go":
        return
    uvloop.run(work(app, seen))
    sys.stdout.flush()
    os._exit(0)  # don't wait on libraries' leftover threads (each already stopped)


async def work(app: App, seen: dict[str, Any]) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with app.worker():
        await stop.wait()
    await app.close()
    emit("result", **seen)


class Worker:
    """One worker process (this script's ``worker`` command), stopped by its pid."""

    def __init__(self, url: str, mode: str | None) -> None:
        argv = [sys.executable, str(Path(__file__).resolve()), "worker", "--redis-url", url,
                "--durability", mode or "", "--concurrency", str(CONCURRENCY)]
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


# -- the servers ---------------------------------------------------------------------

@dataclasses.dataclass
class Setup:
    """Where one durable mode and its ``off`` are measured: a master (and a replica)."""

    name: str
    label: str
    mode: str
    url: str
    port: int
    replica: bool
    client: redis.Redis = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.client = redis.Redis(port=self.port, socket_timeout=30)

    def flush(self) -> None:
        self.client.flushall()
        if self.replica:
            self.wait_in_sync()

    def wait_in_sync(self) -> None:
        """Until the replica is online and has acknowledged every write so far (a
        FLUSHALL, the previous measurement's jobs): ``WAIT`` from the driver."""
        deadline = time.monotonic() + SYNC_TIMEOUT
        while True:
            replica = self.client.info("replication").get("slave0")
            if isinstance(replica, dict) and replica.get("state") == "online" and \
                    int(self.client.execute_command(  # type: ignore[no-untyped-call]
                        "WAIT", 1, 1000)) >= 1:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: the replica is not in sync ({replica})")
            time.sleep(POLL)

    def left(self) -> int:
        """Jobs still queued or in progress (an in-progress list is gone once empty)."""
        keys = Keys(NAMESPACE)
        count = int(self.client.llen(keys.queue(QUEUE)))
        # No SCAN: a key per job's record makes one cost more than the worker's scripts.
        for identity in self.client.smembers(keys.queue_identities(QUEUE)):
            count += int(self.client.llen(keys.in_progress(QUEUE, identity.decode())))
        return count

    def version(self) -> str:
        info = self.client.info("server")
        name = "Valkey" if "valkey_version" in info else "Redis"
        return f"{name} {info.get('valkey_version') or info['redis_version']}"

    def close(self) -> None:
        self.client.close()


@contextlib.contextmanager
def setups(fsyncs: list[str]) -> Iterator[list[Setup]]:
    """The master + replica pair, and one Valkey with AOF per fsync policy."""
    from cogworker_async.redis.embedded import find_binary
    from tests.servers import ServerProcess

    started: list[ServerProcess] = []
    made: list[Setup] = []
    try:
        master = ServerProcess()
        started.append(master.start())
        replica = ServerProcess(extra=["--replicaof", "127.0.0.1", str(master.port)])
        started.append(replica.start())
        made.append(Setup("replica", "master + 1 replica", "replica", master.url,
                          master.port, replica=True))
        made[-1].wait_in_sync()
        for policy in fsyncs:
            server = ServerProcess(appendonly=True, binary=find_binary(),
                                   extra=["--appendfsync", policy])
            started.append(server.start())
            made.append(Setup(f"aof-{policy}", f"AOF, appendfsync {policy}", "aof",
                              server.url, server.port, replica=False))
        yield made
    finally:
        for setup in made:
            setup.close()
        for server in reversed(started):
            server.cleanup()


# -- the measurements ----------------------------------------------------------------

def jobs_of(app: App) -> tuple[Any, Any]:
    async def noop(ts: float) -> None:
        """The driver's registration of the jobs (it only enqueues)."""

    return (app.job(name=NOOP, retry=False)(noop),
            app.job(name=PROBE, retry=False)(noop))


async def enqueues(url: str, mode: str | None, sizes: Sizes) -> dict[str, Any]:
    """Concurrent enqueue rate, then sequential latency; ``NotDurable`` counted."""
    app = app_for(url, mode)
    noop, _ = jobs_of(app)
    refused = 0

    async def one() -> float:
        nonlocal refused
        began = time.perf_counter()
        try:
            await noop.enqueue(time.time())
        except NotDurable:
            refused += 1
        return time.perf_counter() - began

    try:
        for _ in range(WARMUP):
            await one()
        share = [sizes.enqueue_n // ENQUEUERS + (i < sizes.enqueue_n % ENQUEUERS)
                 for i in range(ENQUEUERS)]

        async def enqueuer(count: int) -> None:
            for _ in range(count):
                await one()

        began = time.perf_counter()
        await asyncio.gather(*(enqueuer(count) for count in share))
        concurrent = sizes.enqueue_n / (time.perf_counter() - began)
        latencies = [await one() for _ in range(sizes.sequential_n)]
    finally:
        await app.close()
    return {"enqueue_rate": concurrent, "enqueue_p50_ms": 1000 * percentile(latencies, 0.5),
            "enqueue_p99_ms": 1000 * percentile(latencies, 0.99), "not_durable": refused}


async def prefill(url: str, mode: str | None, n: int) -> float:
    """``n`` no-op jobs, ``enqueue_many`` in chunks; returns jobs/s (after one untimed
    call on a queue no worker serves: connection, scripts, queue registration)."""
    app = app_for(url, mode)
    noop, _ = jobs_of(app)
    try:
        await noop.options(queue=WARMUP_QUEUE).enqueue_many([((0.0,), {})])
        began = time.perf_counter()
        for start in range(0, n, CHUNK):
            now = time.time()
            await noop.enqueue_many([((now,), {})] * min(CHUNK, n - start))
        return n / (time.perf_counter() - began)
    finally:
        await app.close()


async def probes(url: str, mode: str | None, count: int) -> int:
    """``count`` probe jobs, one at a time, ``PROBE_INTERVAL`` apart at least; returns
    how many enqueues raised ``NotDurable``."""
    app = app_for(url, mode)
    _, probe = jobs_of(app)
    refused = 0
    try:
        for _ in range(count):
            began = time.perf_counter()
            try:
                await probe.enqueue(time.time())
            except NotDurable:
                refused += 1
            await asyncio.sleep(max(0.0, PROBE_INTERVAL - (time.perf_counter() - began)))
        return refused
    finally:
        await app.close()


def wait_for(condition: Any, bound: float, what: str) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {bound:.0f}s")
        time.sleep(POLL)


def processing(setup: Setup, mode: str | None, sizes: Sizes) -> dict[str, Any]:
    """Prefill, run one worker over the jobs (until done or the cap), then the probes
    on the idle worker."""
    import uvloop

    worker = Worker(setup.url, mode)
    try:
        worker.expect("ready")  # its imports done: they would compete with the prefill
        bulk = uvloop.run(prefill(setup.url, mode, sizes.noop_n))
        worker.go()
        began = time.monotonic()
        capped = False
        while setup.left():
            if worker.process.poll() is not None:
                raise RuntimeError(f"{setup.name}: the worker exited early")
            if time.monotonic() - began > sizes.noop_cap:
                capped = True  # leave the rest: the worker finishes what it fetched
                setup.client.delete(Keys(NAMESPACE).queue(QUEUE))
                wait_for(lambda: not setup.left(), DRAIN_TIMEOUT, f"{setup.name} drain")
                break
            time.sleep(POLL)
        refused = uvloop.run(probes(setup.url, mode, sizes.probes))
        expected = sizes.probes - refused
        wait_for(lambda: not setup.left(), DRAIN_TIMEOUT, f"{setup.name} probes")
        result = worker.stop()
    finally:
        worker.finish()
    done = int(result["n"])
    latencies: list[float] = result["latencies"]
    if done == 0 or (not capped and done != sizes.noop_n) or len(latencies) < expected:
        raise RuntimeError(f"{setup.name}/{mode}: {done} of {sizes.noop_n} jobs and "
                           f"{len(latencies)} of {expected} probes ran")
    wall = result["last"] - result["first"]
    return {"enqueue_many_rate": bulk, "noop_rate": done / wall if wall > 0 else 0.0,
            "noop_done": done, "capped": capped,
            "start_p50_ms": 1000 * percentile(latencies, 0.5),
            "start_p99_ms": 1000 * percentile(latencies, 0.99),
            "probe_not_durable": refused}


def measure(setup: Setup, mode: str | None, sizes: Sizes) -> dict[str, Any]:
    import uvloop

    setup.flush()
    figures = uvloop.run(enqueues(setup.url, mode, sizes))
    queued = int(setup.client.llen(Keys(NAMESPACE).queue(QUEUE)))
    wanted = WARMUP + sizes.enqueue_n + sizes.sequential_n
    if not wanted - figures["not_durable"] <= queued <= wanted:  # a refused one may be there
        raise RuntimeError(f"{setup.name}/{mode}: {queued} of {wanted} enqueues queued")
    setup.flush()
    figures.update(processing(setup, mode, sizes))
    return figures


# -- report --------------------------------------------------------------------------

METRICS: Final = [  # key, heading, format
    ("enqueue_rate", f"enqueue, {ENQUEUERS} concurrent (jobs/s)", "{:,.0f}"),
    ("enqueue_p50_ms", "enqueue p50 (ms)", "{:.2f}"),
    ("enqueue_p99_ms", "enqueue p99 (ms)", "{:.2f}"),
    ("enqueue_many_rate", f"enqueue_many, {CHUNK:,} a call (jobs/s)", "{:,.0f}"),
    ("noop_rate", f"no-op processing, 1 worker × {CONCURRENCY} (jobs/s)", "{:,.0f}"),
    ("start_p50_ms", "enqueue → start p50 (ms)", "{:.2f}"),
    ("start_p99_ms", "enqueue → start p99 (ms)", "{:.2f}"),
]


def summarize(runs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """Medians over runs of each figure, off and durable, and of each run's ratio
    durable ÷ off (the two measured back to back on the same servers)."""
    out: dict[str, Any] = {"off": {}, "on": {}, "ratio": {}}
    for key, _, _ in METRICS:
        out["off"][key] = statistics.median(off[key] for off, _ in runs)
        out["on"][key] = statistics.median(on[key] for _, on in runs)
        out["ratio"][key] = statistics.median(
            on[key] / off[key] if off[key] else math.nan for off, on in runs)
    for side, index in (("off", 0), ("on", 1)):
        out[side]["capped"] = any(run[index]["capped"] for run in runs)
        out[side]["not_durable"] = sum(run[index]["not_durable"] +
                                       run[index]["probe_not_durable"] for run in runs)
    return out


def report(results: dict[str, Any], versions: dict[str, str], sizes: Sizes) -> str:
    lines = [
        f"{sizes.enqueue_n:,} enqueues from {ENQUEUERS} tasks; {sizes.sequential_n} "
        f"sequential enqueues (latency); {sizes.noop_n:,} no-op jobs queued with "
        f"enqueue_many, then one worker (concurrency {CONCURRENCY}, cap "
        f"{sizes.noop_cap:.0f} s); {sizes.probes} enqueue → start probes on the idle "
        f"worker. Median of {sizes.runs} run(s); off and the durable mode back to back "
        "in each run, on the same servers; × = durable ÷ off (median of the runs' "
        "ratios: below 1 for a rate, above 1 for a latency, is the cost).",
        "",
        "| metric | " + " | ".join(
            f"{r['label']}: off | {r['mode']}" for r in results.values()) + " |",
        "|---|" + "---:|---:|" * len(results),
    ]
    for key, heading, fmt in METRICS:
        cells = []
        for result in results.values():
            mark = " †" if key == "noop_rate" else ""
            off_mark = mark if result["off"]["capped"] else ""
            on_mark = mark if result["on"]["capped"] else ""
            cells.append(fmt.format(result["off"][key]) + off_mark)
            cells.append(fmt.format(result["on"][key]) + on_mark +
                         f" ({result['ratio'][key]:.2f}×)")
        lines.append(f"| {heading} | " + " | ".join(cells) + " |")
    lines += ["", "Servers: " + "; ".join(
        f"{r['label']}: {versions[name]}" for name, r in results.items()) +
        ". Replica pair without persistence; AOF on the embedded Valkey (WAITAOF). "
        "† stopped at the time cap: rate over the jobs done."]
    refused = {name: r["on"]["not_durable"] for name, r in results.items()
               if r["on"]["not_durable"] or r["off"]["not_durable"]}
    if refused:
        lines.append("NotDurable raised by enqueues (durability_timeout 1 s): " +
                     ", ".join(f"{name} {count}" for name, count in refused.items()) + ".")
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    worker = sub.add_parser("worker", help="(internal) one worker process")
    worker.add_argument("--redis-url", required=True)
    worker.add_argument("--durability", default="")
    worker.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--quick", action="store_true", help="small N, 1 run (under a minute)")
    parser.add_argument("--runs", type=int, help="runs, median reported (3; --quick 1)")
    parser.add_argument("--fsync", default="everysec,always",
                        help="appendfsync policies of the AOF rows (everysec,always)")
    parser.add_argument("--json", help="also write the raw figures here")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.command == "worker":
        worker_main(args)
        return 0
    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the servers are stopped
    fsyncs = [policy for policy in args.fsync.split(",") if policy]
    runs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    with setups(fsyncs) as made:
        versions = {setup.name: setup.version() for setup in made}
        log("servers: " + ", ".join(f"{s.name} {versions[s.name]} on :{s.port}" for s in made))
        for run in range(1, sizes.runs + 1):
            for setup in made:
                pair = []
                for mode in (None, setup.mode):
                    log(f"run {run}/{sizes.runs}: {setup.name}, durability={mode} ...")
                    figures = measure(setup, mode, sizes)
                    log("  " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in figures.items()))
                    pair.append(figures)
                runs.setdefault(setup.name, []).append((pair[0], pair[1]))
        labels = {setup.name: (setup.label, setup.mode) for setup in made}
    results = {name: {"label": labels[name][0], "mode": labels[name][1], **summarize(done)}
               for name, done in runs.items()}
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": vars(args), "sizes": dataclasses.asdict(sizes), "versions": versions,
             "runs": runs, "results": results}, indent=1))
    print(report(results, versions, sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
