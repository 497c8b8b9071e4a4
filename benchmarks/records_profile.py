#!/usr/bin/env python3
"""Where a job's Redis time goes, with status records on and off: ``INFO commandstats``
per job (commands run inside Lua included) for the enqueue and for the processing,
Redis CPU per job, Redis bytes per queued job; optionally a py-spy profile of the worker.

    .venv/bin/python benchmarks/records_profile.py [--n N] [--rounds R] [--spy DIR]

One private ``redis-server`` (no persistence); each round runs ``on`` then ``off``:
``N`` no-op jobs queued with ``enqueue_many`` (``metrics_cost.py``'s prefill), then one
embedded worker at concurrency 10 (``metrics_cost.py``'s worker process) runs them.
``CONFIG RESETSTAT`` before each phase, so each phase's figures are its own. One JSON
line per side and round on stdout. ``--spy DIR`` records the worker of each ``on`` side
with ``py-spy record -f raw`` (py-spy must be installed in the venv) into
``DIR/spy_on_<round>.txt``.

Why: the records' cost is time Redis spends, not the worker's CPU (it barely moves), so
the per-command figures say which command of which move to take away.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for path in (HERE.parent, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import metrics_cost  # noqa: E402
import redis  # noqa: E402
import uvloop  # noqa: E402

MIN_PER_JOB = 0.05
"""Commands run fewer times than this per job are left out of the report."""


def per_job(stats: dict[str, Any], n: int) -> dict[str, dict[str, float]]:
    """``{command: {"calls": per job, "usec": per job}}`` of an ``INFO commandstats``."""
    return {name.removeprefix("cmdstat_"): {"calls": round(v["calls"] / n, 2),
                                            "usec": round(v["usec"] / n, 2)}
            for name, v in stats.items() if v["calls"] / n >= MIN_PER_JOB}


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def side(client: redis.Redis, url: str, n: int, tracked: bool,
         spy: Path | None) -> dict[str, Any]:
    client.flushall()
    worker = metrics_cost.Worker(metrics_cost.worker_argv(url, None, tracked))
    profiler = None
    try:
        worker.expect("ready")
        empty = int(client.info("memory")["used_memory"])  # the server's own, left out
        client.config_resetstat()
        filled = uvloop.run(metrics_cost.prefill(url, n, tracked))
        enqueue = per_job(client.info("commandstats"), n)
        memory = int(client.info("memory")["used_memory"]) - empty
        client.config_resetstat()
        began = redis_cpu(client)
        if spy is not None:
            profiler = subprocess.Popen(
                [str(Path(sys.executable).parent / "py-spy"), "record", "-f", "raw",
                 "-r", "200", "-o", str(spy), "-p", str(worker.process.pid)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # attached before the first job
        worker.go()
        while metrics_cost.left(client):
            if worker.process.poll() is not None:
                raise RuntimeError("the worker exited early")
            time.sleep(metrics_cost.POLL)
        used = redis_cpu(client) - began
        processing = per_job(client.info("commandstats"), n)
        result = worker.stop()
    finally:
        worker.finish()
        if profiler is not None:
            profiler.terminate()
            profiler.wait()
    wall = result["last"] - result["first"]
    return {"side": "on" if tracked else "off", "jobs_per_s": round(n / wall),
            "worker_cpu_us": round(1e6 * result["cpu"] / n, 1),
            "redis_cpu_us": round(1e6 * used / n, 1),
            "bulk_jobs_per_s": round(n / filled), "bytes_per_queued_job": round(memory / n),
            "enqueue": enqueue, "processing": processing}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--spy", type=Path, default=None)
    args = parser.parse_args()
    from tests.servers import ServerProcess

    server = ServerProcess().start()
    client = redis.Redis(port=server.port, socket_timeout=30)
    try:
        for round_ in range(1, args.rounds + 1):
            for tracked in (True, False):
                spy = (args.spy / f"spy_on_{round_}.txt"
                       if args.spy is not None and tracked else None)
                print(json.dumps(side(client, server.url, args.n, tracked, spy)), flush=True)
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
