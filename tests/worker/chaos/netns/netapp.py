"""The job app of the network-partition tests, run by the real CLI inside a namespace:

    ip netns exec <ns> python -m cogworker_async run tests.worker.chaos.netns.netapp:jobs

Configured like tests/worker/e2e/jobsapp.py (``E2E_REDIS_URL``, ``E2E_NAMESPACE``,
``E2E_SETTINGS``), plus ``NETNS_WITNESS``: the path of this run's witness file. Every job
appends one JSON line when it starts and one when it finishes (``{"e", "tag", "jid",
"pid", "t"}``), each with one ``write`` on an ``O_APPEND`` descriptor: lines of several
processes never interleave, and the record needs no network at all — it survives every
fault the tests put on the links, and counting runs adds no packet to a faulted link.
``record`` finishes at once; ``hold`` runs until the test creates its gate file, for
every process or for one pid (``gate``).

``python -m tests.worker.chaos.netns.netapp enqueue URL NAMESPACE TAG`` is the enqueuer of the
lost-reply scenario: it enqueues a warm-up job (its connections are then open), prints
``ready``, waits for a line on stdin, enqueues ``TAG`` and prints what came of it as one
JSON line (``{"jid"}`` or ``{"error", "message"}``, with ``"seconds"``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio

from cogworker_async import App, current_job
from cogworker_async.enqueue.handles import JobFunction
from tests.worker.e2e.jobsapp import FAST, NAMESPACE_ENV, SETTINGS_ENV, URL_ENV

WITNESS_ENV: Final = "NETNS_WITNESS"
WARM_UP_TAG: Final = "warm-up"
GATE_TIMEOUT: Final = 60.0
"""Seconds a ``hold`` job waits for its gate before giving up (it then fails)."""
GATE_POLL: Final = 0.02


class _Witness:
    """This process's append-only descriptor on the witness file (opened on first use)."""

    def __init__(self) -> None:
        self.path = ""
        self._fd: int | None = None

    def write(self, event: str, tag: str) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        line = json.dumps({"e": event, "tag": tag, "jid": current_job().jid,
                           "pid": os.getpid(), "t": time.time()})
        os.write(self._fd, line.encode() + b"\n")


witness = _Witness()


@dataclass(frozen=True)
class Event:
    e: str
    """``start`` or ``finish``."""
    tag: str
    jid: str
    pid: int
    t: float


def events(path: Path) -> list[Event]:
    """Every event of the witness file, in the order written."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [Event(**json.loads(line)) for line in text.splitlines() if line]


def finishes(path: Path) -> int:
    """How many finishes the witness file holds (cheap: no parsing)."""
    try:
        return path.read_bytes().count(b'"e": "finish"')
    except FileNotFoundError:
        return 0


async def record(tag: str) -> None:
    """Starts and finishes at once."""
    witness.write("start", tag)
    witness.write("finish", tag)


def gate(witness_file: Path, tag: str, pid: int | None = None) -> Path:
    """The file that lets ``hold(tag)`` finish in process ``pid`` (None: everywhere)."""
    return witness_file.parent / f"gate-{tag}-{'all' if pid is None else pid}"


async def hold(tag: str) -> None:
    """Runs until the test opens its gate (a file: no network), then finishes; fails
    after ``GATE_TIMEOUT`` s."""
    witness.write("start", tag)
    path = Path(witness.path)
    with anyio.fail_after(GATE_TIMEOUT):
        while not (gate(path, tag).exists() or gate(path, tag, os.getpid()).exists()):
            await anyio.sleep(GATE_POLL)
    witness.write("finish", tag)


@dataclass(frozen=True)
class Jobs:
    app: App
    record: JobFunction[[str], Awaitable[None]]
    hold: JobFunction[[str], Awaitable[None]]


def build(redis_url: str, namespace: str, **overrides: Any) -> Jobs:
    """The App on ``redis_url`` and ``namespace`` (fast settings), its jobs registered."""
    app = App(redis_url, namespace=namespace, **{**FAST, **overrides})
    return Jobs(app, record=app.job(name="record")(record), hold=app.job(name="hold")(hold))


def _from_env() -> App | None:
    url = os.environ.get(URL_ENV)
    if not url:
        return None  # imported by the test process: it calls build() itself
    witness.path = os.environ[WITNESS_ENV]
    return build(url, os.environ[NAMESPACE_ENV],
                 **json.loads(os.environ.get(SETTINGS_ENV) or "{}")).app


jobs = _from_env()


async def enqueue_on_cue(url: str, namespace: str, tag: str) -> None:
    """Warm up, say ``ready``, wait for the cue, enqueue ``tag``, print what came of it
    (before closing anything: the outcome is what the caller saw)."""
    built = build(url, namespace)
    try:
        await built.record.enqueue(WARM_UP_TAG)
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        began = time.monotonic()
        outcome: dict[str, Any]
        try:
            jid = await built.record.enqueue(tag)
        except Exception as exc:  # what the caller sees is the point
            outcome = {"error": type(exc).__name__, "module": type(exc).__module__,
                       "message": str(exc)}
        else:
            outcome = {"jid": jid}
        outcome["seconds"] = time.monotonic() - began
        print(json.dumps(outcome), flush=True)
    finally:
        await built.app.close()


def main(argv: list[str]) -> None:
    if argv[:1] != ["enqueue"] or len(argv) != 4:
        raise SystemExit("usage: python -m tests.worker.chaos.netns.netapp "
                         "enqueue URL NAMESPACE TAG")
    asyncio.run(enqueue_on_cue(*argv[1:]))


if __name__ == "__main__":
    main(sys.argv[1:])
