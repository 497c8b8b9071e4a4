#!/usr/bin/env python3
"""Redis Cluster rows of ``make bench``: no-op jobs on 6 queues, 3 masters vs one Redis.

    .venv/bin/python benchmarks/cluster.py [--quick] [--n N] [--workers W] [--runs R]
                                           [--ceiling-workers 1,2,3] [--json PATH]

Runs with the project's venv (``benchmarks/run.py`` calls it for its ``cluster``
scenario): the standard library, the project's package (and redis-py, its dependency),
and the tests' server harness.

Why these measurements: a queue's keys share one hash slot, so one queue lives on one
shard and the Redis work of a job (fetch, ack) lands on that shard only. On a machine
with few cores the total throughput cannot grow with shards (the cores are shared), so
what shows the scaling is the Redis CPU each shard spends: with 6 queues spread 2 per
master, each master should carry about a third of it. The ceiling of one Redis is
1 / (Redis CPU per job): the jobs/s at which its one core is busy all the time. A cluster
of S shards with queues spread evenly has S times a shard's ceiling (1 / a shard's Redis
CPU per job of its queues, measured here: a node in cluster mode spends somewhat more
per job than a plain Redis), as long as no single queue is the bottleneck (one queue =
one shard).

- ``cluster``: ``N`` no-op jobs enqueued with ``enqueue_many`` (chunks of 1,000) over 6
  queues chosen so that 2 hash to each master, then ``W`` worker processes (embedded
  ``App.worker()`` on uvloop, concurrency 10, the 6 queues with equal weights so each
  fetch draws its own order and the shards are served at once) run them. Wall time is
  from the first job's start to the last job's end (each worker stamps them), Redis
  CPU is ``used_cpu_user + used_cpu_sys`` (INFO cpu) per master, before the workers are
  told to go and after every queue and in-progress list is empty.
- ``single``: the same workload on one ``redis-server``.
- ``ceiling``: the single workload with 1, 2, 3 worker processes: Redis CPU utilisation
  (CPU seconds / wall seconds) and jobs/s; extrapolated ceiling = jobs/s / utilisation.

Servers are private (free loopback ports, no persistence), started the way the tests do
(``tests/servers.py``, ``tests/cluster_harness.py``: masters only, no replicas, so that
no replication traffic shares the cores) and stopped by pid.

Internal: ``cluster.py worker --redis-url URL --queues a,b --concurrency C`` is one worker
process (JSON lines on stdout: ``ready``, then, after ``go`` on stdin and SIGTERM,
``result``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # `python benchmarks/cluster.py` puts benchmarks/ first, not ROOT
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402  (after the path fix: tests/ is imported from ROOT)
from redis.crc import key_slot  # noqa: E402

from cogworker_async import App  # noqa: E402
from cogworker_async.redis.keys import Keys  # noqa: E402

NAMESPACE = "bench"
JOB = "bench.noop"
QUEUES_PER_MASTER = 2
MASTERS = 3
CHUNK = 1000
POLL = 0.025
"""Seconds between the driver's checks for "all done" (LLEN + SCAN per node: a few
commands per check, under 1 % of the Redis work measured)."""
CAP = 300.0
"""Seconds a measurement may take before it is abandoned."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def noop(ts: float) -> None:
    """The driver's registration of the job (it only enqueues)."""


# -- one worker process --------------------------------------------------------------

def worker_main(args: argparse.Namespace) -> None:
    """Build the App and its job, say ``ready``, wait for ``go`` on stdin, run the
    embedded worker until SIGTERM, then say ``result``: jobs run, CPU, first/last
    job stamps (``time.time()``: comparable across processes of one machine)."""
    import uvloop

    queues = args.queues.split(",")
    app = App(args.redis_url, namespace=NAMESPACE, concurrency=args.concurrency,
              queues=[(queue, 1) for queue in queues])
    seen: dict[str, float] = {"n": 0}

    @app.job(name=JOB, retry=False)
    async def run(ts: float) -> None:
        now = time.time()
        seen.setdefault("first", now)
        seen["last"] = now
        seen["n"] += 1

    emit("ready")
    if sys.stdin.readline().strip() != "go":
        return
    uvloop.run(work(app, seen))
    sys.stdout.flush()
    os._exit(0)  # don't wait on libraries' leftover threads (each already stopped)


async def work(app: App, seen: dict[str, float]) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    began = cpu_seconds()
    async with app.worker():
        await stop.wait()
        used = cpu_seconds() - began
    await app.close()
    emit("result", n=int(seen["n"]), cpu=used, first=seen.get("first"), last=seen.get("last"))


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


# -- the servers ---------------------------------------------------------------------

@dataclasses.dataclass
class Target:
    """Where the jobs go: a URL, the master ports, and which master holds each queue."""

    name: str
    url: str
    ports: list[int]
    port_of_queue: dict[str, int]
    namespace_port: int
    nodes: dict[int, redis.Redis] = dataclasses.field(default_factory=dict)
    own: Counter[str] = dataclasses.field(default_factory=Counter)
    """Commands the driver itself sent (its checks), left out of the per-job counts."""

    def node(self, port: int) -> redis.Redis:
        if port not in self.nodes:
            self.nodes[port] = redis.Redis(port=port, socket_timeout=30)
        return self.nodes[port]

    def cpu(self) -> dict[int, float]:
        out = {}
        for port in self.ports:
            info = self.node(port).info("cpu")
            out[port] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return out

    def commands(self) -> tuple[Counter[str], Counter[str]]:
        """Calls and µs per command, all nodes (INFO commandstats; inside Lua included:
        a script's µs include those of the commands it ran)."""
        calls: Counter[str] = Counter()
        usec: Counter[str] = Counter()
        for port in self.ports:
            for key, value in self.node(port).info("commandstats").items():
                name = str(key).removeprefix("cmdstat_")
                calls[name] += int(value["calls"])
                usec[name] += int(value["usec"])
        return calls, usec

    def flush(self) -> None:
        for port in self.ports:
            self.node(port).flushall()

    def left(self, keys: Keys) -> int:
        """Jobs still queued or in progress (an in-progress list is gone once empty)."""
        count = 0
        for port in self.ports:
            client = self.node(port)
            queued = [keys.queue(q) for q, p in self.port_of_queue.items() if p == port]
            with client.pipeline(transaction=False) as pipe:
                for key in queued:
                    pipe.llen(key)
                count += sum(int(n) for n in pipe.execute())
            self.own["llen"] += len(queued)
            cursor = None
            while cursor != 0:
                cursor, found = client.scan(cursor or 0, match=keys.in_progress_pattern,
                                            count=1000)
                self.own["scan"] += 1
                for name in found:
                    count += int(client.llen(name))
                    self.own["llen"] += 1
        return count

    def close(self) -> None:
        for client in self.nodes.values():
            client.close()
        self.nodes.clear()


def pick_queues(port_of_slot: Callable[[int], int], ports: Sequence[int]) -> dict[str, int]:
    """Queue names, ``QUEUES_PER_MASTER`` per master, from "q0", "q1", ... by the slot
    of each queue's list (its hash tag is the queue name)."""
    keys = Keys(NAMESPACE)
    chosen: dict[str, int] = {}
    for i in range(10_000):
        name = f"q{i}"
        port = int(port_of_slot(key_slot(keys.queue(name).encode())))
        if sum(p == port for p in chosen.values()) < QUEUES_PER_MASTER:
            chosen[name] = port
        if len(chosen) == QUEUES_PER_MASTER * len(ports):
            return chosen
    raise RuntimeError("could not spread the queues over the masters")


@contextlib.contextmanager
def servers() -> Iterator[tuple[Target, Target]]:
    """A 3-master cluster and one plain server, with the same 6 queue names."""
    from tests.cluster_harness import ClusterProcess
    from tests.servers import ServerProcess

    cluster = ClusterProcess(masters=MASTERS, replicas=0)
    single = ServerProcess()
    targets: list[Target] = []
    try:
        cluster.start()
        single.start()
        masters = [port for _, port in cluster.masters()]
        chosen = pick_queues(cluster.port_of_slot, masters)
        ns_port = cluster.port_of_slot(key_slot(Keys(NAMESPACE).queues.encode()))
        targets = [
            Target("cluster", cluster.url, masters, chosen, ns_port),
            Target("single", single.url, [single.port],
                   dict.fromkeys(chosen, single.port), single.port),
        ]
        yield targets[0], targets[1]
    finally:
        for target in targets:
            target.close()
        cluster.cleanup()
        single.cleanup()


# -- one measurement -----------------------------------------------------------------

async def prefill(target: Target, n: int) -> float:
    """``n`` jobs over the target's queues (as even as can be), ``enqueue_many`` in
    chunks; returns the seconds it took."""
    app = App(target.url, namespace=NAMESPACE)
    job = app.job(name=JOB, retry=False)(noop)
    queues = list(target.port_of_queue)
    share = shares(queues, n)
    began = time.perf_counter()
    try:
        while any(share.values()):
            for queue in queues:
                size = min(CHUNK, share[queue])
                if size:
                    now = time.time()
                    await job.options(queue=queue).enqueue_many([((now,), {})] * size)
                    share[queue] -= size
        return time.perf_counter() - began
    finally:
        await app.close()


class Worker:
    """One worker process (this script's ``worker`` command)."""

    def __init__(self, target: Target, concurrency: int) -> None:
        argv = [sys.executable, str(Path(__file__).resolve()), "worker",
                "--redis-url", target.url, "--queues", ",".join(target.port_of_queue),
                "--concurrency", str(concurrency)]
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
        try:
            return self.expect("result")
        finally:
            self.finish()

    def finish(self) -> None:
        """Wait for the process to exit; kill it (by its pid) if it does not."""
        if self.process.poll() is None:
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def shares(queues: Sequence[str], n: int) -> dict[str, int]:
    """How many of ``n`` jobs each queue gets: as even as can be."""
    return {q: n // len(queues) + (i < n % len(queues)) for i, q in enumerate(queues)}


@dataclasses.dataclass
class Run:
    """What one measurement saw: each worker's result, and Redis' side of it."""

    workers: list[dict[str, Any]]
    cpu: dict[int, float]
    """Redis CPU seconds per master."""
    calls: Counter[str]
    usec: Counter[str]


def run_workers(target: Target, workers: int, concurrency: int) -> Run:
    """Start ``workers`` worker processes, let them go once all are ready, wait until
    every queue and in-progress list is empty, stop them."""
    keys = Keys(NAMESPACE)
    started = [Worker(target, concurrency) for _ in range(workers)]
    try:
        for worker in started:
            worker.expect("ready")
        calls, usec = target.commands()
        target.own.clear()
        cpu = target.cpu()
        began = time.perf_counter()
        for worker in started:
            worker.go()
        while target.left(keys):
            if time.perf_counter() - began > CAP:
                raise RuntimeError(f"{target.name}: not done within {CAP:.0f}s")
            if any(worker.process.poll() is not None for worker in started):
                raise RuntimeError(f"{target.name}: a worker process exited early")
            time.sleep(POLL)
        cpu_after = target.cpu()
        calls_after, usec_after = target.commands()
        results = [worker.stop() for worker in started]
    finally:
        for worker in started:
            if worker.process.poll() is None:
                worker.process.kill()
            worker.finish()
    calls_after.subtract(calls)
    calls_after.subtract(target.own)
    usec_after.subtract(usec)
    return Run(results, {port: cpu_after[port] - cpu[port] for port in target.ports},
               calls_after, usec_after)


def measure(target: Target, n: int, workers: int, concurrency: int) -> dict[str, Any]:
    """Prefill ``n`` jobs, run ``workers`` worker processes over them; the figures."""
    target.flush()
    enqueue_seconds = asyncio.run(prefill(target, n))
    run = run_workers(target, workers, concurrency)
    done = sum(r["n"] for r in run.workers)
    if done != n:
        raise RuntimeError(f"{target.name}: {done} jobs ran, {n} were enqueued")
    wall = max(r["last"] for r in run.workers if r["last"]) - \
        min(r["first"] for r in run.workers if r["first"])
    jobs_on = dict.fromkeys(target.ports, 0)
    for queue, count in shares(list(target.port_of_queue), n).items():
        jobs_on[target.port_of_queue[queue]] += count
    total = sum(run.cpu.values())
    return {
        "n": n, "workers": workers, "rate": n / wall, "wall": wall,
        "enqueue_many_rate": n / enqueue_seconds,
        "worker_cpu_us": 1e6 * sum(r["cpu"] for r in run.workers) / n,
        "redis_cpu_us": 1e6 * total / n,
        "redis_util": total / wall,
        "ceiling": n / total if total else 0.0,  # = rate / redis_util: 1 / CPU per job
        # all nodes saturate together only if the load is even: the busiest one decides
        "ceiling_busiest": n / max(run.cpu.values()) if total else 0.0,
        "shards": [{"port": port, "queues": sum(p == port for p in
                                                target.port_of_queue.values()),
                    "namespace": port == target.namespace_port, "jobs": jobs_on[port],
                    "cpu_us_per_job": 1e6 * run.cpu[port] / max(1, jobs_on[port]),
                    "cpu_us_per_job_all": 1e6 * run.cpu[port] / n,
                    "share": run.cpu[port] / total if total else 0.0,
                    "util": run.cpu[port] / wall} for port in target.ports],
        "commands_per_job": {name: count / n for name, count in run.calls.most_common()
                             if count > 0 and name != "info"},
        "command_us_per_job": {name: spent / n for name, spent in run.usec.most_common()
                               if spent > 0 and name not in ("info", "llen", "scan")},
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput (its figures belong together: shares sum to 1)
    plus the median and the spread of each headline figure."""
    ordered = sorted(runs, key=lambda r: r["rate"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    for key in ("rate", "worker_cpu_us", "redis_cpu_us", "redis_util", "enqueue_many_rate",
                "ceiling", "ceiling_busiest"):
        values = [r[key] for r in runs]
        chosen[f"{key}_median"] = statistics.median(values)
        chosen[f"{key}_range"] = (min(values), max(values))
    chosen["runs"] = len(runs)
    return chosen


# -- report --------------------------------------------------------------------------

def report(results: dict[str, Any], args: argparse.Namespace) -> str:
    single, cluster = results["single"], results["cluster"]
    lines = [
        f"{args.n:,} no-op jobs on 6 queues (2 per master), {args.workers} worker "
        f"processes at concurrency {args.concurrency}; median of {args.runs} run(s) "
        "(per-shard figures from the run with the median throughput).",
        "",
        "| metric | one Redis | 3-master cluster |",
        "|---|---:|---:|",
        f"| no-op processing (jobs/s) | {single['rate_median']:,.0f} | "
        f"{cluster['rate_median']:,.0f} |",
        f"| worker CPU / job (µs) | {single['worker_cpu_us_median']:,.0f} | "
        f"{cluster['worker_cpu_us_median']:,.0f} |",
        f"| Redis CPU / job, all nodes (µs) | {single['redis_cpu_us_median']:,.1f} | "
        f"{cluster['redis_cpu_us_median']:,.1f} |",
        f"| Redis CPU / wall, all nodes | {single['redis_util_median']:.2f} | "
        f"{cluster['redis_util_median']:.2f} |",
        f"| enqueue_many, 1,000 a call (jobs/s) | {single['enqueue_many_rate_median']:,.0f} | "
        f"{cluster['enqueue_many_rate_median']:,.0f} |",
        "",
        "Per shard (cluster):",
        "",
        "| master | queues | jobs | Redis CPU / job of its queues (µs) | "
        "share of the cluster's Redis CPU | CPU / wall |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for shard in cluster["shards"]:
        mark = " (+ namespace slot)" if shard["namespace"] else ""
        lines.append(f"| :{shard['port']}{mark} | {shard['queues']} | {shard['jobs']:,} | "
                     f"{shard['cpu_us_per_job']:.1f} | {100 * shard['share']:.0f} % | "
                     f"{shard['util']:.2f} |")
    lines += ["", "Commands Redis ran per job (INFO commandstats, all nodes, those run "
              "inside Lua included):", ""]
    for label, result in (("one Redis", single), ("cluster", cluster)):
        top = list(result["commands_per_job"].items())[:10]
        lines.append(f"- {label}: " + ", ".join(f"{name} {per:.2f}" for name, per in top))
    if results.get("ceiling"):
        lines += [
            "",
            "Ceiling of one Redis (same workload, one server, W worker processes):",
            "",
            "| W | jobs/s | Redis CPU / job (µs) | Redis CPU / wall | "
            "ceiling = jobs/s ÷ CPU / wall = 1 / CPU per job (jobs/s, extrapolated) |",
            "|---:|---:|---:|---:|---:|",
        ]
        for row in results["ceiling"]:
            lines.append(f"| {row['workers']} | {row['rate_median']:,.0f} | "
                         f"{row['redis_cpu_us_median']:.1f} | {row['redis_util_median']:.2f} | "
                         f"{row['ceiling_median']:,.0f} |")
        # the run nearest saturation: the shortest extrapolation
        best = max(results["ceiling"], key=lambda r: r["redis_util_median"])
        lines += ["", f"One Redis core saturates at about "
                  f"{best['ceiling_median']:,.0f} jobs/s (1 / Redis CPU per job "
                  f"at W={best['workers']}, where Redis was busiest: "
                  f"{best['redis_util_median']:.0%} of a core; extrapolated). The cluster's "
                  f"ceiling: about {cluster['ceiling_busiest_median']:,.0f} jobs/s "
                  f"({cluster['ceiling_busiest_median'] / best['ceiling_median']:.1f} × one "
                  "Redis; 1 / the busiest master's Redis CPU per job of the run, where it "
                  "would saturate with this spread of the queues). A cluster of S masters "
                  "with the queues spread evenly: about S × a master's ceiling, while no "
                  "single queue is the bottleneck (one queue = one master)."]
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    worker = sub.add_parser("worker", help="(internal) one worker process")
    worker.add_argument("--redis-url", required=True)
    worker.add_argument("--queues", required=True)
    worker.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="5,000 jobs, 1 run")
    parser.add_argument("--n", type=int, help="jobs per measurement (20,000; --quick 5,000)")
    parser.add_argument("--runs", type=int, help="runs, median reported (3; --quick 1)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--ceiling-workers", default="1,2,3",
                        help="worker processes for the one-Redis ceiling ('' to skip)")
    parser.add_argument("--json", help="also write the raw figures here")
    args = parser.parse_args()
    if args.command is None:
        args.n = args.n or (5000 if args.quick else 20_000)
        args.runs = args.runs or (1 if args.quick else 3)
    return args


def main() -> int:
    args = parse_args()
    if args.command == "worker":
        worker_main(args)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the servers are stopped
    ceiling_workers = [int(w) for w in args.ceiling_workers.split(",") if w.strip()]
    runs: dict[str, list[dict[str, Any]]] = {"single": [], "cluster": []}
    runs.update({f"ceiling-{w}": [] for w in ceiling_workers})
    with servers() as (cluster, single):
        log(f"cluster masters {cluster.ports}, queues {cluster.port_of_queue}, "
            f"namespace slot on :{cluster.namespace_port}; one Redis on :{single.ports[0]}")
        for run in range(1, args.runs + 1):  # the two interleaved, run by run
            for target in (single, cluster):
                log(f"run {run}/{args.runs}: {target.name}, {args.workers} workers ...")
                result = measure(target, args.n, args.workers, args.concurrency)
                runs[target.name].append(result)
                log(f"  {result['rate']:,.0f} jobs/s, Redis {result['redis_cpu_us']:.1f} µs/job")
            for w in ceiling_workers:
                if w == args.workers:  # the single row above is this measurement
                    runs[f"ceiling-{w}"].append(runs["single"][-1])
                    continue
                log(f"run {run}/{args.runs}: ceiling, one Redis, {w} workers ...")
                result = measure(single, args.n, w, args.concurrency)
                runs[f"ceiling-{w}"].append(result)
                log(f"  {result['rate']:,.0f} jobs/s, Redis {result['redis_cpu_us']:.1f} µs/job,"
                    f" {result['redis_util']:.2f} busy")
    results: dict[str, Any] = {"single": median_run(runs["single"]),
                               "cluster": median_run(runs["cluster"]),
                               "ceiling": [median_run(runs[f"ceiling-{w}"])
                                           for w in ceiling_workers]}
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs,
                                               "results": results}, indent=1))
    print(report(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
