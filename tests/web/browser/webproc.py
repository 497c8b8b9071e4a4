"""The dashboard served the way a user serves it: ``cogworker-async web MODULE:ATTR
--port N`` in a subprocess (uvicorn, loopback), its output in a log file, stopped by pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

import httpx

from tests.servers import free_port
from tests.waiting import wait_until
from tests.web.browser.jobsapp import TARGET
from tests.worker.e2e.jobsapp import NAMESPACE_ENV, SETTINGS_ENV, URL_ENV
from tests.workerproc import ROOT

START_TIMEOUT: Final = 20.0
STOP_TIMEOUT: Final = 10.0


class WebProcess:
    def __init__(self, redis_url: str, namespace: str) -> None:
        self.port = free_port()
        self.redis_url = redis_url
        self.namespace = namespace
        fd, path = tempfile.mkstemp(prefix="cogworker-web-", suffix=".log")
        os.close(fd)
        self.log_path = Path(path)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> WebProcess:
        env = dict(os.environ)
        env.pop("COGWORKER_REDIS_URL", None)
        env.pop("COGWORKER_WEB_AUTH", None)
        env.update({URL_ENV: self.redis_url, NAMESPACE_ENV: self.namespace,
                    SETTINGS_ENV: json.dumps({}), "PYTHONUNBUFFERED": "1"})
        command = [sys.executable, "-m", "cogworker_async", "web", TARGET,
                   "--port", str(self.port), "--log-level", "WARNING"]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log,
                                            stderr=subprocess.STDOUT)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait_ready(self) -> None:
        async def answers() -> bool:
            assert self.process is not None
            assert self.process.poll() is None, f"the dashboard exited:\n{self.log()}"
            try:
                async with httpx.AsyncClient() as http:
                    return (await http.get(self.url + "/stats.json")).status_code == 200
            except httpx.TransportError:
                return False

        await wait_until(answers, timeout=START_TIMEOUT, every=0.1)

    def stop(self) -> None:
        """SIGTERM (uvicorn's graceful stop), SIGKILL if it lingers; by pid."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT)
        print(f"--- web {process.pid} (exit {process.returncode}) ---\n{self.log()}")
        self.log_path.unlink(missing_ok=True)
