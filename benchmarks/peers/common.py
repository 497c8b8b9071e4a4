"""What every peer script shares (stdlib only: each peer runs in its own venv).

A peer script is ``python peers/<system>_peer.py --redis-url URL [--mode M] COMMAND``:

- ``enqueue --n N [--job noop|sleep|probe] [--interval S]``: N jobs one at a time
  (``--interval``: pause between them, for latency probes);
- ``enqueue-bulk --n N --chunk C``: N jobs through the system's bulk API, C per call;
- ``work --n N --concurrency C [--job ...] [--sleep-ms MS]``: run the system's real
  worker until N jobs ran (or ``--max-seconds`` passed), then stop it.

Every job takes one argument, ``ts``: ``time.time()`` just before its enqueue call; the
worker side records ``time.time() - ts`` when the job starts (its pick-up latency).

Output is JSON lines on stdout: ``{"event": "ready"}`` once the worker runs, then
``{"event": "result", ...}`` (and ``{"event": "stopped"}`` once the worker stopped).
``work --cprofile PATH`` also dumps cProfile stats of the measured part. Timing and CPU
cover only the measured part (no imports): CPU is this process's ``getrusage`` (all
threads), wall time ``perf_counter``.

A system's own CLI worker (``<system>_app.py``: what it imports) runs the same job
functions in processes the driver did not write: there, with ``BENCH_SLOTS`` set, each
process counts its jobs in a slot of its own, a small shared file (``Slot``) that the
driver reads without asking the worker anything. ``app_args()`` gives those modules the
driver's settings (``BENCH_REDIS_URL``, ``BENCH_MODE``, ``BENCH_CONCURRENCY``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mmap
import os
import resource
import struct
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

JOBS = ("noop", "sleep", "probe")


def parse_args(modes: Sequence[str] = ("default",)) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--mode", default=modes[0], choices=modes)
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("enqueue")
    one.add_argument("--n", type=int, required=True)
    one.add_argument("--job", default="noop", choices=JOBS)
    one.add_argument("--interval", type=float, default=0.0)
    one.add_argument("--max-seconds", type=float, default=120.0)
    bulk = sub.add_parser("enqueue-bulk")
    bulk.add_argument("--n", type=int, required=True)
    bulk.add_argument("--chunk", type=int, default=1000)
    bulk.add_argument("--job", default="noop", choices=JOBS)
    bulk.add_argument("--max-seconds", type=float, default=300.0)
    work = sub.add_parser("work")
    work.add_argument("--n", type=int, required=True)
    work.add_argument("--concurrency", type=int, default=10)
    work.add_argument("--job", default="noop", choices=JOBS)
    work.add_argument("--sleep-ms", type=float, default=50.0)
    work.add_argument("--max-seconds", type=float, default=120.0)
    work.add_argument("--cprofile", help="write cProfile stats of the measured part here")
    return parser.parse_args()


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


SLOTS_ENV = "BENCH_SLOTS"
SLOT = struct.Struct("<qddd")
"""A slot: jobs run, last job's start, first job's start (``time.monotonic()``, one clock
for every process on Linux) and the process's CPU seconds just before its first job.
``benchmarks/cli_workers.py`` reads the same layout."""


def app_args() -> argparse.Namespace:
    """The driver's settings for a CLI worker's app module (environment variables)."""
    return argparse.Namespace(redis_url=os.environ.get("BENCH_REDIS_URL",
                                                       "redis://127.0.0.1:6379/0"),
                              mode=os.environ.get("BENCH_MODE", "default"),
                              concurrency=int(os.environ.get("BENCH_CONCURRENCY", "10")))


def own_cpu() -> float:
    """This process's CPU seconds, all threads, as the driver reads any process's
    (``/proc/<pid>/task/*/schedstat``, ns), so that the two readings subtract."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass
    return total / 1e9


class Slot:
    """This process's counters in ``<BENCH_SLOTS>/<pid>``, written on each job (a memory
    write: no system call, so the count costs the worker next to nothing)."""

    def __init__(self, directory: str) -> None:
        cpu, now = own_cpu(), time.monotonic()
        path = os.path.join(directory, str(os.getpid()))
        fd = os.open(path + ".new", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, SLOT.size)
            self.map = mmap.mmap(fd, SLOT.size)
        finally:
            os.close(fd)
        self.count = 1
        SLOT.pack_into(self.map, 0, 1, now, now, cpu)
        os.rename(path + ".new", path)  # the driver never sees a slot before its first job

    def hit(self) -> None:
        self.count += 1
        struct.pack_into("<qd", self.map, 0, self.count, time.monotonic())


class Tracker:
    """Counts job runs in the worker process; set ``event`` at the target count."""

    def __init__(self) -> None:
        self.target = sys.maxsize
        self.count = 0
        self.latencies: list[float] = []
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.slots = os.environ.get(SLOTS_ENV) or None
        self.slot: Slot | None = None
        self.event: asyncio.Event | None = None
        self.sleep_s = 0.05
        self.running = 0
        self.peak = 0

    def start(self) -> None:
        """A job began (for the peak of jobs running at once)."""
        self.running += 1
        self.peak = max(self.peak, self.running)

    def hit(self, ts: float, *, record: bool = False) -> None:
        """A job ran."""
        if self.slots is not None:
            if self.slot is None:
                self.slot = Slot(self.slots)
            else:
                self.slot.hit()
        now = time.time()
        self.last_at = time.perf_counter()
        if self.first_at is None:
            self.first_at = self.last_at
        if record:
            self.latencies.append(now - float(ts))
        self.count += 1
        if self.count >= self.target and self.event is not None:
            self.event.set()


    def forked(self) -> None:
        """In a forked child (a pool's worker process): its own slot, its own counts."""
        self.slot = None
        self.count = 0
        self.first_at = self.last_at = None


TRACKER = Tracker()
os.register_at_fork(after_in_child=TRACKER.forked)


async def noop(ts: float) -> None:
    TRACKER.hit(ts)


async def sleep(ts: float) -> None:
    TRACKER.start()
    await asyncio.sleep(TRACKER.sleep_s)
    TRACKER.running -= 1
    TRACKER.hit(ts)


async def probe(ts: float) -> None:
    TRACKER.hit(ts, record=True)


class Client(Protocol):
    bulk_method: str

    async def one(self, job: str, ts: float) -> None: ...

    async def bulk(self, job: str, stamps: list[float]) -> None: ...


class Peer(Protocol):
    """What a peer script provides (see the ``*_peer.py`` files)."""

    def client(self) -> AbstractAsyncContextManager[Client]: ...

    def worker(self, concurrency: int) -> AbstractAsyncContextManager[Any]: ...


async def enqueue(peer: Peer, args: argparse.Namespace) -> None:
    async with peer.client() as client:
        deadline = time.perf_counter() + args.max_seconds
        began, cpu = time.perf_counter(), cpu_seconds()
        done = 0
        for _ in range(args.n):
            await client.one(args.job, time.time())
            done += 1
            if args.interval:
                await asyncio.sleep(args.interval)
            if time.perf_counter() > deadline:
                break
        seconds = time.perf_counter() - began
        emit("result", n=done, seconds=seconds, cpu=cpu_seconds() - cpu,
             capped=done < args.n)


async def enqueue_bulk(peer: Peer, args: argparse.Namespace) -> None:
    async with peer.client() as client:
        deadline = time.perf_counter() + args.max_seconds
        began, cpu = time.perf_counter(), cpu_seconds()
        done = 0
        while done < args.n and time.perf_counter() < deadline:
            size = min(args.chunk, args.n - done)
            now = time.time()
            await client.bulk(args.job, [now] * size)
            done += size
        seconds = time.perf_counter() - began
        emit("result", n=done, seconds=seconds, cpu=cpu_seconds() - cpu,
             method=client.bulk_method, capped=done < args.n)


async def work(peer: Peer, args: argparse.Namespace) -> None:
    TRACKER.target = args.n
    TRACKER.event = asyncio.Event()
    TRACKER.sleep_s = args.sleep_ms / 1000
    profiler = None
    if args.cprofile:
        import cProfile

        profiler = cProfile.Profile()
    began, cpu = time.perf_counter(), cpu_seconds()
    async with peer.worker(args.concurrency):
        emit("ready")
        if profiler is not None:
            profiler.enable()
        try:
            await asyncio.wait_for(TRACKER.event.wait(), args.max_seconds)
        except TimeoutError:
            pass
        seconds = time.perf_counter() - began
        used = cpu_seconds() - cpu
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.cprofile)
        first = None if TRACKER.first_at is None else TRACKER.first_at - began
        span = None if TRACKER.first_at is None or TRACKER.last_at is None \
            else TRACKER.last_at - TRACKER.first_at
        usage = resource.getrusage(resource.RUSAGE_SELF)
        emit("result", n=TRACKER.count, seconds=seconds, cpu=used, first_job=first, span=span,
             rss_kb=rss_kb(), maxrss_kb=usage.ru_maxrss, latencies=TRACKER.latencies,
             peak_running=TRACKER.peak,
             capped=TRACKER.count < args.n)
    emit("stopped")


def run(peer_factory: Callable[[argparse.Namespace], Peer],
        modes: Sequence[str] = ("default",)) -> None:
    """Parse the command line, build the peer, run the command on uvloop."""
    args = parse_args(modes)
    peer = peer_factory(args)
    command = {"enqueue": enqueue, "enqueue-bulk": enqueue_bulk, "work": work}[args.command]
    import uvloop

    uvloop.run(command(peer, args))
    sys.stdout.flush()
    os._exit(0)  # don't wait on libraries' leftover threads (each already stopped)
