"""Ctrl-C in the terminal of a worker on the embedded server. The terminal signals its
whole foreground process group; the embedded server runs in a session of its own, so it
is still there while the worker gives its running job its shutdown_timeout, and the
job's outcome is written (it would otherwise stay 'running', to be run again). The
server is the folder's: it is still running after the worker has gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cogworker_async.redis.embedded import EmbeddedServer
from tests.cli.supervisor import embeddedapp
from tests.waiting import wait_until
from tests.workerproc import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def test_ctrl_c_lets_a_running_job_settle_on_the_embedded_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "COGWORKER_DATA_DIR": str(data), "E2E_NAMESPACE": "fleet",
           "PYTHONUNBUFFERED": "1"}
    env.pop("COGWORKER_REDIS_URL", None)
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "cogworker_async", "run",
             "tests.cli.supervisor.embeddedapp:jobs"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, process_group=0)
    try:
        await wait_until(lambda: "started: queues" in log.read_text(), timeout=30)
        monkeypatch.setenv("COGWORKER_DATA_DIR", str(data))
        jid = await embeddedapp.slow.enqueue(2.0)
        assert jid is not None

        # Started, not only fetched: the fetch already says "running", and a job fetched
        # but not started when the signal comes is given back, unrun (queued again).
        async def running() -> bool:
            found = await embeddedapp.jobs.status(jid)
            return found.state == "running" and found.progress is not None
        await wait_until(running, timeout=10, every=0.05)
        os.killpg(worker.pid, signal.SIGINT)  # Ctrl-C
        await wait_until(lambda: worker.poll() is not None, timeout=40)
        await embeddedapp.jobs.close()
        assert EmbeddedServer(data).status().running  # outlived the worker that started it
        status = await embeddedapp.jobs.status(jid)
        assert (worker.returncode, status.state) == (0, "succeeded"), log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        await embeddedapp.jobs.close()
        EmbeddedServer(data).stop()
