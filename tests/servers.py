"""Private Redis-compatible servers for tests: each on its own free port, stopped by pid.

Tests never depend on the machine's shared server: a session gets one of these, and a
test that kills, pauses or restarts Redis starts its own.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Final

import redis

START_TIMEOUT: Final = 15.0


def server_binary() -> str:
    """redis-server from PATH if there is one (the real thing), else the embedded binary."""
    explicit = os.environ.get("COGWORKER_TEST_REDIS_SERVER")
    if explicit:
        return explicit
    found = shutil.which("redis-server")
    if found:
        return found
    from cogworker_async.redis.embedded import find_binary

    return find_binary()


def every_binary() -> list[str]:
    """Every distinct server this machine has: redis-server from PATH and the embedded
    Valkey (the server matrix of ``make test-matrix``)."""
    found = []
    on_path = shutil.which("redis-server")
    if on_path:
        found.append(os.path.abspath(on_path))
    from cogworker_async.redis.embedded import find_binary

    with contextlib.suppress(Exception):
        embedded = os.path.abspath(find_binary())
        if embedded not in found:
            found.append(embedded)
    return found


def other_binaries() -> list[str]:
    """The servers ``make test`` did not run on (it takes ``server_binary()``)."""
    default = os.path.abspath(server_binary())
    return [binary for binary in every_binary() if binary != default]


PORT_BASE: Final = 20000
PORT_SPAN: Final = 700
"""Each xdist worker (``PYTEST_XDIST_WORKER``: gw0, gw1...) takes its ports from its own
range of PORT_SPAN ports from PORT_BASE: below the kernel's ephemeral range (32768 and
up), so that neither another worker nor any outgoing connection's local port can take a
port between our check and the server's bind. 16 workers fit below 32768."""
_next_port = itertools.count(random.randrange(PORT_SPAN))


def free_port() -> int:
    """A port nothing listens on, from this test process's own range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = PORT_BASE + (int(worker) % 16 if worker.isdigit() else 0) * PORT_SPAN
    for _ in range(PORT_SPAN):
        port = base + next(_next_port) % PORT_SPAN
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken: by a server of ours, or another test session's
            return port
    raise RuntimeError(f"no free port in {base}..{base + PORT_SPAN - 1}")


class ServerProcess:
    """One private server on 127.0.0.1:<free port>, data in its own temp dir."""

    def __init__(self, *, appendonly: bool = False, extra: list[str] | None = None,
                 binary: str | None = None) -> None:
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="cogworker-test-redis-"))
        self.appendonly = appendonly
        self.extra = extra or []
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> ServerProcess:
        args = [
            self.binary or server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.dir), "--save", "", "--daemonize", "no",
            "--appendonly", "yes" if self.appendonly else "no",
            "--logfile", str(self.dir / "server.log"), *self.extra,
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"test server exited: see {self.dir / 'server.log'}")
                with contextlib.suppress(redis.exceptions.RedisError):
                    if client.ping():
                        return self
                time.sleep(0.02)
        finally:
            client.close()
        raise RuntimeError("test server did not start in time")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


if __name__ == "__main__":  # `python -m tests.servers --others`: one path per line
    import sys

    print("\n".join(other_binaries() if "--others" in sys.argv[1:] else every_binary()))
