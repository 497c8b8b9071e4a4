#!/usr/bin/env python3
"""Workflow hand-off rows of ``make bench`` (issue 43 item 6): how long a dependent, a
batch's callback and a chain's next step wait for the end that releases them.

    .venv/bin/python benchmarks/handoff.py [--quick] [--runs R] [--json PATH]

Runs with the project's venv (``benchmarks/run.py`` calls it for its ``handoff``
scenario): the standard library, the project's package (uvloop) and the tests' server
harness (a private ``redis-server``, no persistence).

Why this measurement: a hand-off is not done by the end itself but by a worker's notes
relay, which the end's script wakes (a PUBLISH on the notes list's name); the relay's
pass every ``poll_interval`` seconds (jittered) is only the bound for a wake-up missed.
So the figures are measured with the product's defaults — ``poll_interval`` is NOT
shortened (the report says which one was in effect, read from the App's settings) —
and ``track_jobs=True`` (batches and dependencies need the records). A hand-off near a
poll (1–3 s with the default 2.0) is a missed wake-up; the table counts them.

One process on uvloop: the worker is embedded in the measuring process (``async with
app.worker():``, concurrency 10, queues ``default``, ``a`` and ``b``), so that a job's
body and the driver read the same ``time.monotonic()``. Each run flushes the server,
starts a new App and worker (logging at WARNING: no line per job), does a few untimed
hand-offs of every kind (the wake-up listener subscribing, the scripts loading; the very
first hand-off of a fresh worker can wait for a relay pass), then, one at a time (each
waits for the one before it to be over, at most ``WAIT`` seconds; a kind that times out
is reported as such and the others still run):

- **dependency**: a parent job, then ``child.options(after=[parent]).enqueue(...)``;
  from the end of the parent's body to the start of the child's. ``dependency, other
  queue``: the same with the parent on queue ``a`` and the child on ``b``.
- **batch callback**: a batch of 3 no-op members with ``on_complete=callback.s(...)``;
  from the end of the last member's body to the start of the callback's.
- **10-step chain**: ``app.chain(*(step.s(i) for i in range(10))).enqueue()`` of no-op
  steps; from just before the enqueue call to the end of the last step's body.

Reported: p50, p99 and max (ms) of each kind over its run, the median over the runs of
each, against the issue's targets (dependency p50 ≤ 5 ms, callback p50 ≤ 10 ms, a
10-step chain ≤ 100 ms, taken here at its p50).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import signal
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # `python benchmarks/handoff.py` puts benchmarks/ first
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402  (after the path fix: tests/ is imported from ROOT)

from cogworker_async import App, JobFunction  # noqa: E402

NAMESPACE: Final = "bench-handoff"
QUEUES: Final = ["default", "a", "b"]
CONCURRENCY: Final = 10
WAIT: Final = 30.0
"""Seconds one hand-off may take before its kind is abandoned (reported as timed out)."""
WARMUP: Final = 3
"""Untimed hand-offs of every kind at the start of each run."""
STEPS: Final = 10
"""Steps of a chain."""
MEMBERS: Final = 3
"""Members of a batch."""
MISSED: Final = 0.5
"""A hand-off slower than this (seconds) waited for a relay pass: its wake-up was missed."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    runs: int
    pairs: int
    """Dependency hand-offs of each dependency kind in a run."""
    batches: int
    chains: int


FULL: Final = Sizes(runs=3, pairs=200, batches=100, chains=30)
QUICK: Final = Sizes(runs=1, pairs=40, batches=20, chains=10)

KINDS: Final = ("dependency", "dependency, other queue", "batch callback", "10-step chain")
TARGETS: Final[dict[str, tuple[str, float]]] = {
    "dependency": ("p50 ≤ 5 ms", 5.0),
    "dependency, other queue": ("p50 ≤ 5 ms", 5.0),
    "batch callback": ("p50 ≤ 10 ms", 10.0),
    "10-step chain": ("≤ 100 ms (p50)", 100.0),
}
"""Each kind's target from the issue, as the report shows it, and its p50 bound in ms."""
WHAT: Final = {
    "dependency": "parent's end → dependent's start",
    "dependency, other queue": "the same, parent on `a`, dependent on `b`",
    "batch callback": f"last of {MEMBERS} members' end → `on_complete` callback's start",
    "10-step chain": "before `chain(...).enqueue()` → last step's end",
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Marks:
    """Times (``time.monotonic()``) noted by the jobs' bodies under a key, and a wait for
    a key to be noted."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self._waiting: dict[str, asyncio.Event] = {}

    def note(self, key: str) -> None:
        self.at[key] = time.monotonic()
        event = self._waiting.get(key)
        if event is not None:
            event.set()

    async def wait(self, key: str) -> float:
        """The time noted under ``key``, once it is (``TimeoutError`` after ``WAIT``)."""
        if key not in self.at:
            event = self._waiting.setdefault(key, asyncio.Event())
            await asyncio.wait_for(event.wait(), timeout=WAIT)
        return self.at[key]


@dataclasses.dataclass
class Bench:
    app: App
    marks: Marks
    parent: JobFunction[..., Any]
    child: JobFunction[..., Any]
    member: JobFunction[..., Any]
    callback: JobFunction[..., Any]
    step: JobFunction[..., Any]


def build(url: str) -> Bench:
    """The App (the defaults but for its namespace, its queues and ``track_jobs``) and
    its jobs: each notes the end or the start of its body under the key it is given."""
    app = App(url, namespace=NAMESPACE, track_jobs=True, queues=QUEUES,
              concurrency=CONCURRENCY)
    marks = Marks()

    @app.job(name="bench.parent", retry=0)
    async def parent(key: str) -> None:
        marks.note(f"{key}:end")

    @app.job(name="bench.child", retry=0)
    async def child(key: str) -> None:
        marks.note(f"{key}:start")

    @app.job(name="bench.member", retry=0)
    async def member(key: str, index: int) -> None:
        marks.note(f"{key}:end{index}")

    @app.job(name="bench.callback", retry=0)
    async def callback(key: str) -> None:
        marks.note(f"{key}:start")

    @app.job(name="bench.step", retry=0)
    async def step(key: str, index: int) -> None:
        if index == STEPS - 1:
            marks.note(f"{key}:end")

    return Bench(app, marks, parent, child, member, callback, step)


# -- one hand-off of each kind: its duration in seconds -------------------------------

async def dependency(bench: Bench, key: str, queues: tuple[str, str]) -> float:
    jid = await bench.parent.options(queue=queues[0]).enqueue(key)
    if jid is None:  # only a unique or a debounced job is refused
        raise RuntimeError("the parent was not enqueued")
    await bench.child.options(queue=queues[1], after=[jid]).enqueue(key)
    started = await bench.marks.wait(f"{key}:start")
    return started - bench.marks.at[f"{key}:end"]


async def same_queue(bench: Bench, key: str) -> float:
    return await dependency(bench, key, ("default", "default"))


async def other_queue(bench: Bench, key: str) -> float:
    return await dependency(bench, key, ("a", "b"))


async def batch_callback(bench: Bench, key: str) -> float:
    async with bench.app.batch(key, on_complete=bench.callback.s(key)):
        for index in range(MEMBERS):
            await bench.member.enqueue(key, index)
    started = await bench.marks.wait(f"{key}:start")
    return started - max(bench.marks.at[f"{key}:end{index}"] for index in range(MEMBERS))


async def chain(bench: Bench, key: str) -> float:
    began = time.monotonic()
    await bench.app.chain(*(bench.step.s(key, index) for index in range(STEPS))).enqueue()
    return await bench.marks.wait(f"{key}:end") - began


HANDOFF: Final[dict[str, Callable[[Bench, str], Awaitable[float]]]] = {
    "dependency": same_queue,
    "dependency, other queue": other_queue,
    "batch callback": batch_callback,
    "10-step chain": chain,
}


def count(kind: str, sizes: Sizes) -> int:
    if kind == "batch callback":
        return sizes.batches
    return sizes.chains if kind == "10-step chain" else sizes.pairs


# -- a run ---------------------------------------------------------------------------

def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def one_run(url: str, run: int, sizes: Sizes) -> tuple[dict[str, Any], float]:
    """Every kind's figures of one run (``timed_out``: hand-offs done before the one that
    took longer than ``WAIT``), and the ``poll_interval`` in effect."""
    bench = build(url)
    figures: dict[str, Any] = {}
    try:
        async with bench.app.worker():
            for kind, handoff in HANDOFF.items():
                log(f"run {run}/{sizes.runs}: {kind} ...")
                took: list[float] = []
                try:
                    for n in range(WARMUP):
                        await handoff(bench, f"r{run}:{kind}:warm{n}")
                    for n in range(count(kind, sizes)):
                        took.append(await handoff(bench, f"r{run}:{kind}:{n}"))
                except TimeoutError:
                    log(f"  timed out after {len(took)} hand-off(s) ({WAIT:.0f} s)")
                    figures[kind] = {"timed_out": len(took)}
                    continue
                ms = [1000 * seconds for seconds in took]
                figures[kind] = {"p50": percentile(ms, 0.5), "p99": percentile(ms, 0.99),
                                 "max": max(ms), "missed": sum(m > 1000 * MISSED for m in ms),
                                 "ms": ms}
                log(f"  p50 {figures[kind]['p50']:.2f} ms, p99 {figures[kind]['p99']:.2f} "
                    f"ms, max {figures[kind]['max']:.1f} ms, {figures[kind]['missed']} "
                    f"over {MISSED:g} s")
    finally:
        await bench.app.close()
    return figures, bench.app.settings.poll_interval


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each kind's medians over the runs (a kind that timed out in any run: its first
    time-out, how many hand-offs were done before it)."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        timed_out = [run[kind]["timed_out"] for run in runs if "timed_out" in run[kind]]
        if timed_out:
            out[kind] = {"timed_out": timed_out[0]}
            continue
        out[kind] = {key: statistics.median(run[kind][key] for run in runs)
                     for key in ("p50", "p99", "max")}
        out[kind]["missed"] = sum(run[kind]["missed"] for run in runs)
    return out


def report(result: dict[str, Any], sizes: Sizes, poll: float, version: str) -> str:
    rows = ["| hand-off | from → to | p50 ms | p99 ms | max ms | over "
            f"{MISSED:g} s | target | met |",
            "|---|---|---:|---:|---:|---:|---|---|"]
    for kind in KINDS:
        figures = result[kind]
        target, bound = TARGETS[kind]
        if "timed_out" in figures:
            rows.append(f"| {kind} | {WHAT[kind]} | timed out after "
                        f"{figures['timed_out']} of {count(kind, sizes)} ({WAIT:.0f} s) | "
                        f"| | | {target} | no |")
            continue
        met = "yes" if figures["p50"] <= bound else "no"
        rows.append(f"| {kind} | {WHAT[kind]} | {figures['p50']:,.2f} | "
                    f"{figures['p99']:,.2f} | {figures['max']:,.1f} | {figures['missed']} | "
                    f"{target} | {met} |")
    return "\n".join([
        f"One process on uvloop, the worker embedded (concurrency {CONCURRENCY}), the "
        f"defaults (`poll_interval` {poll:g} s in effect: a relay pass every "
        f"{poll / 2:g}–{1.5 * poll:g} s, the bound for a missed wake-up; "
        "`track_jobs=True`). Hand-offs one at a time: "
        f"{sizes.pairs} of each dependency kind, {sizes.batches} batches of {MEMBERS} "
        f"no-op members, {sizes.chains} chains of {STEPS} no-op steps a run, after "
        f"{WARMUP} untimed of each; {sizes.runs} run(s), the median of the runs' "
        f"p50, p99 and max. \"over {MISSED:g} s\": hand-offs (all runs) that waited for a "
        "relay pass.",
        "",
        *rows,
        "",
        f"Server: {version}, private, no persistence.",
    ])


# -- main ----------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.pairs} pairs, {QUICK.batches} batches, {QUICK.chains} "
                             f"chains, {QUICK.runs} run")
    parser.add_argument("--runs", type=int,
                        help=f"runs, median reported ({FULL.runs}; --quick {QUICK.runs})")
    parser.add_argument("--json", help="also write the raw figures here")
    return parser.parse_args()


def main() -> int:
    import uvloop

    from tests.servers import ServerProcess

    args = parse_args()
    # WARNING, as every row of `make bench`: no line per job (a handler on the root, so
    # the worker adds none of its own).
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the server is stopped
    server = ServerProcess().start()
    client = redis.Redis(port=server.port, socket_timeout=30)
    runs: list[dict[str, Any]] = []
    poll = 0.0
    try:
        version = f"Redis {client.info('server')['redis_version']}"
        for run in range(1, sizes.runs + 1):
            client.flushall()
            figures, poll = uvloop.run(one_run(server.url, run, sizes))
            runs.append(figures)
    finally:
        client.close()
        server.cleanup()
    result = summarize(runs)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": vars(args), "sizes": dataclasses.asdict(sizes), "version": version,
             "poll_interval": poll, "runs": runs, "result": result}, indent=1))
    print(report(result, sizes, poll, version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
