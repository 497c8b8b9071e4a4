"""A worker subprocess running the real CLI (``cogworker-async run MODULE:ATTR``).

The job module reads its Redis URL, namespace and settings from the environment
(``E2E_REDIS_URL``, ``E2E_NAMESPACE``, ``E2E_SETTINGS`` — see tests/worker/e2e/jobsapp.py).
Output goes to a log file, printed by the fixtures when a test fails. Stopped by pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from tests.waiting import wait_until
from tests.worker.e2e import jobsapp

ROOT: Final = Path(__file__).resolve().parents[1]
"""The repository root: the worker's cwd, so ``tests.*`` modules import."""
TARGET: Final = "tests.worker.e2e.jobsapp:jobs"


class WorkerProcess:
    """One ``cogworker-async run`` subprocess, its output in a log file."""

    def __init__(self, redis_url: str, namespace: str, settings: dict[str, Any],
                 args: list[str], *, target: str = TARGET,
                 env: dict[str, str] | None = None) -> None:
        self.target = target
        self.extra_env = env or {}
        self.redis_url = redis_url
        self.namespace = namespace
        self.settings = settings
        self.args = args
        fd, path = tempfile.mkstemp(prefix="cogworker-e2e-", suffix=".log")
        os.close(fd)
        self.log_path = Path(path)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, command: str = "run") -> WorkerProcess:
        env = dict(os.environ)
        env.pop("COGWORKER_REDIS_URL", None)
        env.update({
            jobsapp.URL_ENV: self.redis_url,
            jobsapp.NAMESPACE_ENV: self.namespace,
            jobsapp.SETTINGS_ENV: json.dumps(self.settings),
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        })
        argv = [sys.executable, "-m", "cogworker_async", command, self.target, *self.args]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log,
                                            stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        assert self.process is not None
        return self.process.poll()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    async def wait_exit(self, timeout: float) -> int:
        """The exit status, once the process has exited (fails after ``timeout`` s)."""
        try:
            await wait_until(lambda: not self.alive(), timeout=timeout)
        except AssertionError:
            raise AssertionError(f"worker {self.pid} still running after {timeout}s:\n"
                                 f"{self.log()}") from None
        assert self.process is not None
        return self.process.returncode

    async def stop(self, timeout: float = 10.0) -> float:
        """SIGTERM, then wait for a clean exit (status 0); returns the seconds it took."""
        began = time.monotonic()
        self.signal(signal.SIGTERM)
        status = await self.wait_exit(timeout)
        assert status == 0, f"worker exited with {status}:\n{self.log()}"
        return time.monotonic() - began

    def kill(self) -> None:
        """Teardown: SIGKILL by pid if still running, and reap."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait(10)

    def cleanup(self) -> None:
        self.kill()
        self.log_path.unlink(missing_ok=True)


@contextmanager
def worker_pool() -> Iterator[list[WorkerProcess]]:
    """Workers appended to the yielded list are killed by pid and cleaned up at the end,
    each one's log printed (pytest shows it when the test failed)."""
    workers: list[WorkerProcess] = []
    try:
        yield workers
    finally:
        for worker in workers:
            try:
                worker.kill()
                print(f"--- worker {worker.pid} (exit {worker.returncode}) ---\n{worker.log()}")
            finally:
                worker.cleanup()
