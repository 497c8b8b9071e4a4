"""Every embedded server this user started: ``embedded status --all`` and ``stop --all``.

The registry (``embedded_registry.py``) says where this user's servers were started;
this module proves each entry before it lists or stops one, and prunes the rest:

- **listed** if its socket answers, as the server cogworker started for that data dir
  (``EmbeddedServer.ours``: the socket ours and closed to others, the pid it reports the
  one in its ``server.pid``), or if it does not answer yet (loading its data, or hung)
  but the entry's pid is still its server: a live process working in that data dir (a
  server ``chdir``\\ s to its ``--dir``), the pid in its ``server.pid``, running a
  server binary, and started when the entry says (read from ``/proc``). Each test
  alone is passed by another process: as root ``kill(pid, 0)`` succeeds for any pid, a
  crashed server leaves its ``server.pid``, and a reused pid may be a shell, or a
  ``tail -f server.log``, working in the data dir. Without ``/proc`` (macOS) such an
  entry is listed, unproven, and left alone: ``stop_all`` reports it, never signals it;
- **pruned** otherwise: its pid gone, or since given to another process, or its socket
  now answered by a server we did not start. A pid read from a file is never signalled
  unproven: a reboot, or a server killed long ago, leaves entries naming someone else.

``stop_all`` stops each one the way ``embedded stop`` does (a SHUTDOWN through its
socket, after the proof: the data is written out first); one that does not answer gets
a SIGTERM by its proven pid (the server's own graceful exit), never a SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cogworker_async.errors import EmbeddedServerError
from cogworker_async.redis import embedded_registry
from cogworker_async.redis.embedded import POLL, STOP_TIMEOUT, EmbeddedServer, find_binary
from cogworker_async.redis.embedded_registry import RegistryEntry

PAGE_KIB: Final = 1024
"""/proc's ``VmRSS`` is in kB (KiB)."""
PROC: Final = Path("/proc")
SERVER_NAMES: Final = frozenset({"redis-server", "valkey-server"})
START_TOLERANCE: Final = 5.0
"""Seconds between the entry's start and the process's: both are whole seconds (the
server's uptime, the boot time), and a reused pid is given seconds later at least."""


@dataclass(frozen=True, slots=True)
class FleetServer:
    """One running server of this user, as ``embedded status --all`` shows it."""

    data_dir: Path
    socket_path: str
    pid: int
    answering: bool
    """False: alive in its data dir but not answering (loading its data, or hung)."""
    rss_bytes: int | None
    uptime_seconds: int | None
    keys: int | None = None
    proven: bool = True
    """False: not answering, and without ``/proc`` its pid cannot be proven its server
    (``stop_all`` leaves it alone and reports it)."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """What ``stop_all`` did to one server: stopped, or why not."""

    data_dir: Path
    pid: int
    error: str | None = None


def running() -> list[FleetServer]:
    """Every server this user started that still runs, oldest first; entries that no
    longer name one of them are removed from the registry."""
    found = []
    for entry in embedded_registry.entries():
        server = _prove(entry)
        if server is None:
            embedded_registry.forget(entry.data_dir)
        else:
            found.append(server)
    return found


def _prove(entry: RegistryEntry) -> FleetServer | None:
    server = EmbeddedServer(entry.data_dir)
    status = server.status()
    if status.running and status.pid is not None and server.ours():
        if status.pid != entry.pid:  # started again by a process that did not record it
            embedded_registry.record(server.data_dir, server.socket_path, status.pid,
                                     time.time() - (status.uptime_seconds or 0))
        return FleetServer(server.data_dir, server.socket_path, status.pid, True,
                           status.rss_bytes, status.uptime_seconds, status.keys)
    proven = _still_its_server(entry, server)
    if proven is False:
        return None
    return FleetServer(server.data_dir, server.socket_path, entry.pid, False,
                       _rss(entry.pid), int(time.time() - entry.started_at),
                       proven=proven is True)


def _still_its_server(entry: RegistryEntry, server: EmbeddedServer) -> bool | None:
    """True if the entry's pid is the server, though it does not answer: a live process
    working in the data dir, the pid the server wrote there, a server binary, started
    when the entry says. False if any of these fails; None if it is alive and named by
    ``server.pid`` but, without ``/proc``, the rest cannot be checked."""
    try:
        os.kill(entry.pid, 0)  # PermissionError: another user's process (not as root)
        written = int(server.pid_file.read_text().strip())
    except (OSError, ValueError):
        return False
    if written != entry.pid:
        return False
    if not PROC.is_dir():
        return None
    try:
        working_in = os.readlink(PROC / str(entry.pid) / "cwd")  # gone for a zombie
    except OSError:
        return False
    return (working_in == str(server.data_dir) and _runs_a_server(entry.pid)
            and _started_near(entry.pid, entry.started_at))


def _runs_a_server(pid: int) -> bool:
    """The process runs a server binary: one of its names, or the one ``embedded``
    starts (``$COGWORKER_REDIS_SERVER`` may name it otherwise)."""
    try:
        # " (deleted)": the binary was upgraded under the running server.
        running = os.readlink(PROC / str(pid) / "exe").removesuffix(" (deleted)")
    except OSError:
        try:  # the server rewrites its title: "<argv[0]> <socket>"; split on the space
            argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, UnicodeDecodeError):
            return False
        running = argv.split(" ")[0]
    if os.path.basename(running) in SERVER_NAMES:
        return True
    with contextlib.suppress(EmbeddedServerError, OSError):
        return os.path.realpath(running) == os.path.realpath(find_binary())
    return False


def _started_near(pid: int, started_at: float) -> bool:
    """The process started within START_TOLERANCE of the entry's start: a pid reused
    since was given to a process started later (``/proc/<pid>/stat``'s field 22, in
    clock ticks since boot, plus ``/proc/stat``'s boot time)."""
    try:
        ticks = int((PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in (PROC / "stat").read_text().splitlines()
                    if line.startswith("btime "))
        per_second = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return abs(boot + ticks / per_second - started_at) <= START_TOLERANCE


def _rss(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * PAGE_KIB
    return None


def stop_all() -> list[Stopped]:
    """Stop every server ``running`` lists; one that fails is reported, the rest go on."""
    done = []
    for server in running():
        try:
            if server.answering:
                EmbeddedServer(server.data_dir).stop()
            elif not server.proven:
                raise EmbeddedServerError(
                    f"the embedded server in {server.data_dir} answers nothing, and pid "
                    f"{server.pid} (its server.pid) cannot be proven its server here (no "
                    f"/proc): left alone; stop it yourself if it is (kill {server.pid})")
            else:
                _terminate(server)
        except EmbeddedServerError as exc:
            done.append(Stopped(server.data_dir, server.pid, str(exc)))
        else:
            done.append(Stopped(server.data_dir, server.pid))
    return done


def _terminate(server: FleetServer) -> None:
    """SIGTERM to a proven server that does not answer: it writes its data out and exits."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while _alive(server.pid):
        if time.monotonic() > deadline:
            raise EmbeddedServerError(
                f"the embedded server in {server.data_dir} (pid {server.pid}) answers "
                f"nothing and did not exit within {STOP_TIMEOUT}s of a SIGTERM; see "
                f"{server.data_dir / 'server.log'}")
        time.sleep(POLL)
    embedded_registry.forget(server.data_dir)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError, IndexError):  # a zombie has exited
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True
