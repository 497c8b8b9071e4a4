#!/usr/bin/env python3
"""What each move of a job costs the server, in instructions: a steady figure whatever
else the machine is doing (the timed benchmarks swing by a third on a shared VM).

    .venv/bin/python benchmarks/script_cost.py [--n N] [--untracked] [--server PATH]

Runs the server under ``valgrind --tool=callgrind``, counting only inside EVALSHA
(``--toggle-collect=evalShaCommand``: the scripts and the commands they run, none of
the server's timers, whose share would grow with the slower wall clock under valgrind).
Three stages, each run with ``N`` and ``3 N`` jobs so that start-up and warm-up cancel
out: ``enqueue`` (``enqueue`` in batches of 100), ``+ fetch`` (fetches of 3), ``+ ack``
(each fetch's 3 acknowledged), through the Store, as the worker calls them. Prints the
instructions per job of each move as JSON. ``--untracked``: with ``track_jobs=False``
(no status records). The server is the embedded Valkey by default: its binary keeps its
symbols, so ``callgrind_annotate`` on the file named in the output says where they go.
Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

STAGES = ("enqueue", "fetch", "ack")
IDENTITY = "host:1:script-cost"


def job(jid: str) -> bytes:
    return json.dumps({"jid": jid, "class": "bench.noop", "args": [], "kwargs": {},
                       "queue": "default", "retry": True, "created_at": 1.0,
                       "enqueued_at": 1.0}, separators=(",", ":")).encode()


async def drive(url: str, n: int, stage: str, tracked: bool) -> None:
    from cogworker_async.redis.store import Store

    store = Store.from_url(url, "script-cost", track_jobs=tracked)
    try:
        jobs = [job(uuid.uuid4().hex[:24]) for _ in range(n)]
        for first in range(0, n, 100):
            await store.enqueue("default", jobs[first:first + 100])
        if stage == "enqueue":
            return
        done = 0
        while done < n:
            fetched = await store.fetch(IDENTITY, ["default"], 3)
            raws = [raw for _, raw in fetched.jobs]
            if not raws:
                break
            done += len(raws)
            if stage == "ack":
                await store.ack(IDENTITY, "default",
                                [(raw, json.loads(raw)["jid"]) for raw in raws])
    finally:
        await store.aclose()


def instructions(server: str, n: int, stage: str, tracked: bool, out: Path) -> int:
    """Instructions the server ran inside EVALSHA for one run of ``drive``."""
    from tests.servers import free_port

    port = free_port()
    process = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--toggle-collect=evalShaCommand",
         f"--callgrind-out-file={out}", server, "--port", str(port), "--save", "",
         "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import redis

        client = redis.Redis(port=port)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the server under valgrind did not start") from None
                time.sleep(0.2)
        asyncio.run(drive(f"redis://127.0.0.1:{port}", n, stage, tracked))
        try:
            client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # it went: that is the answer
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--untracked", action="store_true")
    parser.add_argument("--server", default=None,
                        help="server binary (default: the embedded Valkey)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("script_cost.py needs valgrind (apt-get install valgrind)")
    from cogworker_async.redis.embedded import find_binary

    server = args.server or find_binary()
    directory = Path(tempfile.mkdtemp(prefix="script-cost-"))
    totals: dict[str, float] = {}
    for stage in STAGES:
        small = instructions(server, args.n, stage, not args.untracked,
                             directory / f"{stage}-small.out")
        large = instructions(server, 3 * args.n, stage, not args.untracked,
                             directory / f"{stage}-large.out")
        totals[stage] = (large - small) / (2 * args.n)
    per_move = {"enqueue": totals["enqueue"], "fetch": totals["fetch"] - totals["enqueue"],
                "ack": totals["ack"] - totals["fetch"]}
    print(json.dumps({"server": os.path.basename(server), "records": not args.untracked,
                      "n": args.n, "instructions_per_job": {
                          name: round(value) for name, value in per_move.items()},
                      "all": round(totals["ack"]),
                      "callgrind_files": str(directory)}, indent=1))


if __name__ == "__main__":
    main()
