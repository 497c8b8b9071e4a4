"""``run --processes`` where it met trouble in review, on real processes and a real Redis:
one Ctrl-C in a terminal is one graceful stop; ``--burst`` with ``--max-jobs`` still
empties the queue; a ``--max-memory`` below a fresh worker backs off; the Redis URL is
not on the children's command lines; a metrics port set in the App serves every child;
``--reload`` survives a typo until it is fixed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from tests.cli.supervisor.test_supervisor import START, Supervised, alive, children_of
from tests.cli.supervisor.test_supervisor import jobs as jobs
from tests.cli.supervisor.test_supervisor import r as r
from tests.cli.supervisor.test_supervisor import supervise as supervise
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.worker.e2e import jobsapp
from tests.workerproc import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


class InTerminal(Supervised):
    """A supervisor started as a shell starts a foreground command: the leader of its
    own process group, which a terminal's Ctrl-C signals as a whole."""

    def start(self) -> InTerminal:
        env = dict(os.environ)
        env.pop("COGWORKER_REDIS_URL", None)
        env.update({jobsapp.URL_ENV: self.redis_url, jobsapp.NAMESPACE_ENV: self.namespace,
                    jobsapp.SETTINGS_ENV: json.dumps(self.settings),
                    "PYTHONUNBUFFERED": "1"})
        command = [sys.executable, "-m", "cogworker_async", "run", self.target, *self.args]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log,
                                            stderr=subprocess.STDOUT, process_group=0)
        return self


async def test_one_ctrl_c_stops_the_fleet_gracefully(
    redis_url: str, namespace: str, r: redis.asyncio.Redis, jobs: Any,
) -> None:
    """README: SIGINT is passed on (graceful); a second one stops at once. A terminal's
    Ctrl-C signals the whole foreground process group: each child gets SIGINT from the
    terminal and SIGTERM from the supervisor — two signals, a hard stop."""
    sup = InTerminal(redis_url, namespace, {**chaosapp.SETTINGS, "shutdown_timeout": 20.0},
                     ["--processes", "1"], target=chaosapp.TARGET)
    sup.seen = set()
    sup.start()
    try:
        await jobs.work.enqueue("slow", 3.0)

        async def started() -> bool:
            return await chaosapp.counts(r, chaosapp.started_key(namespace)) == {"slow": 1}
        await wait_until(started, timeout=START, every=0.05)
        os.killpg(sup.pid, signal.SIGINT)  # Ctrl-C
        code = await sup.wait_exit(40)
        finished = await chaosapp.counts(r, chaosapp.finished_key(namespace))
        assert (code, finished["slow"]) == (0, 1), sup.log()[-3000:]
    finally:
        sup.cleanup()


async def test_burst_with_max_jobs_still_works_the_queue_empty(
    supervise: Any, r: redis.asyncio.Redis, namespace: str, jobs: Any,
) -> None:
    """README: --burst exits 0 once the queues are empty; --max-jobs replaces a worker.
    A child recycled by --max-jobs also exits 0, which burst mode takes for 'done'."""
    tags = [f"bm{i}" for i in range(12)]
    await jobs.work.enqueue_many([((tag, 0.0), {}) for tag in tags])
    sup = supervise("--processes", "1", "--burst", "--max-jobs", "5")
    assert await sup.wait_exit(60) == 0
    finished = await chaosapp.counts(r, chaosapp.finished_key(namespace))
    assert sum(finished[tag] for tag in tags) == 12, (finished, sup.log()[-2000:])


async def test_max_memory_below_a_fresh_worker_backs_off(supervise: Any) -> None:
    """A --max-memory under a fresh worker's footprint recycles every child as soon as
    the memory is read: a restart loop with no backoff (a crash loop gets 1, 2, 4 s...)."""
    sup = supervise("--processes", "1", "--max-memory", "1M")
    began = time.monotonic()
    await wait_until(lambda: sup.log().count("started (slot") >= 4, timeout=START,
                     every=0.1)
    assert time.monotonic() - began >= 1 + 2 + 4, sup.log()[-2000:]


async def test_the_redis_url_is_not_on_the_childrens_command_lines(
    supervise: Any, redis_url: str,
) -> None:
    """The App's Redis URL (a password in it, in production) is copied onto every
    child's command line: /proc/PID/cmdline and ps show it to every user of the host."""
    sup = supervise("--processes", "1")
    await wait_until(lambda: len(sup.children()) == 1, timeout=START, every=0.1)
    (child,) = sup.children()
    cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert redis_url not in cmdline, cmdline


async def test_a_metrics_port_set_in_the_app_serves_every_child(
    supervise: Any,
) -> None:
    """--metrics-port PORT gives child i PORT+i; the same port set in the App's settings
    is given to every child as is: the second cannot bind it."""
    import socket

    port = _two_free_ports(socket)
    sup = supervise("--processes", "2", metrics_port=port)
    await wait_until(lambda: len(sup.children()) == 2, timeout=START, every=0.1)

    async def both_serve() -> bool:
        served = 0
        for candidate in (port, port + 1):
            with socket.socket() as client:
                served += client.connect_ex(("127.0.0.1", candidate)) == 0
        return served == 2 or not sup.alive()
    await wait_until(both_serve, timeout=START, every=0.2)
    assert "could not start" not in sup.log(), sup.log()[-2000:]
    assert sup.alive()


async def test_reload_survives_a_typo_until_it_is_fixed(
    redis_url: str, namespace: str,
) -> None:
    """--reload: a save with a typo makes the restarted child exit 2 ('could not
    start'); the supervisor waits for the next change instead of stopping for good."""
    pytest.importorskip("watchfiles")
    from tests.cli.supervisor import reloadapp

    probe = Path(__file__).with_name("_reload_probe.py")
    sup = Supervised(redis_url, namespace, dict(chaosapp.SETTINGS), ["--reload"],
                     target="tests.cli.supervisor.reloadapp:jobs")
    sup.seen = set()
    sup.start()
    try:
        await wait_until(lambda: len(sup.children()) == 1, timeout=START, every=0.1)
        first = set(sup.children())
        reloadapp.BROKEN.touch()
        probe.write_text("# typo\n")
        await wait_until(lambda: "--reload:" in sup.log(), timeout=START, every=0.2)
        await wait_until(lambda: not sup.alive() or "could not start (exit 2)" in sup.log(),
                         timeout=START, every=0.1)
        reloadapp.BROKEN.unlink()
        probe.write_text("# fixed\n")
        await wait_until(lambda: not sup.alive() or bool(
            set(children_of(sup.pid)) - first), timeout=START, every=0.2)
        assert sup.alive(), sup.log()[-2000:]
        assert not any(alive(child) for child in first)
    finally:
        reloadapp.BROKEN.unlink(missing_ok=True)
        probe.unlink(missing_ok=True)
        sup.cleanup()


def _two_free_ports(socket: Any) -> int:
    """A port P with P and P + 1 both free now (a random P + 1 may be another test's)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        with socket.socket() as second:
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two consecutive free ports")
