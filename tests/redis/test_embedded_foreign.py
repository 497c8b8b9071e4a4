"""A server on the embedded server's socket that cogworker did not start is refused
(issue 40, defect 23).

A data dir too long for a unix socket gets ``/tmp/cogworker-<hash>.sock``: a name anyone
can compute, in a directory anyone can write. Whatever answers PING there must prove to
be the server cogworker started for that data dir — its socket owned by this user and
closed to others (mode 0700), the pid it reports the one in the data dir's
``server.pid`` — or it is refused, with an error that says why, and receives nothing:
no job's arguments, no SHUTDOWN. A running process's client checks the socket's owner
and mode before each connection, so a socket put there after its server was stopped is
refused too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from cogworker_async import App
from cogworker_async.errors import EmbeddedServerError
from cogworker_async.redis.embedded import EmbeddedServer, find_binary, ping
from tests.conftest import FAST

WAIT = 10.0
NOBODY = 65534
"""Another user's uid, for the socket a root test hands over to it."""


def _binary() -> str | None:
    try:
        return find_binary()
    except EmbeddedServerError:
        return None


pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="unix sockets, /proc"),
    pytest.mark.skipif(_binary() is None, reason="no server binary (embedded extra)"),
]


def wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {WAIT}s")
        time.sleep(0.01)


class Foreign:
    """A server started by the test on a socket path, with a dir of its own: not ours."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cogworker-foreign-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.socket_path = ""

    def start(self, socket_path: str, mode: str = "700") -> Foreign:
        self.socket_path = socket_path
        self.process = subprocess.Popen(
            [find_binary(), "--port", "0", "--unixsocket", socket_path,
             "--unixsocketperm", mode, "--dir", str(self.dir), "--daemonize", "no",
             "--save", "", "--appendonly", "no", "--logfile", str(self.dir / "log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: ping(socket_path), "the foreign server answers")
        return self

    def keys(self) -> int:
        with redis.Redis(unix_socket_path=self.socket_path) as r:
            return int(r.dbsize())

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def cleanup(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(WAIT)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def foreign() -> Iterator[Foreign]:
    server = Foreign()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def long_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir too long for a socket of its own: its socket is in /tmp."""
    data_dir = tmp_path / ("d" * 120)
    try:
        yield data_dir
    finally:
        server = EmbeddedServer(data_dir)
        with contextlib.suppress(EmbeddedServerError, OSError):
            server.stop()
        pid_file = data_dir / "server.pid"
        with contextlib.suppress(OSError, ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text()), 9)


def _app(data_dir: Path) -> App:
    app = App(data_dir=str(data_dir), **FAST)

    @app.job(name="pay")
    async def pay(card: str) -> None: ...

    return app


@pytest.mark.parametrize(("mode", "why"), [("700", "server.pid"), ("777", "mode")])
async def test_a_server_started_by_someone_else_on_the_tmp_socket_gets_no_job(
    long_dir: Path, foreign: Foreign, mode: str, why: str,
) -> None:
    socket_path = EmbeddedServer(long_dir).socket_path
    assert socket_path.startswith("/tmp/")
    foreign.start(socket_path, mode)

    app = _app(long_dir)
    try:
        with pytest.raises(EmbeddedServerError) as caught:
            await app.enqueue("pay", "4242 4242 4242 4242")
    finally:
        await app.close()

    message = str(caught.value)
    assert socket_path in message
    assert "not started by cogworker" in message
    assert why in message
    assert foreign.keys() == 0  # nothing was sent to it
    assert foreign.alive()  # nor was it stopped or replaced


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a socket to another user needs root")
def test_a_socket_of_another_user_is_refused_naming_its_owner(
    long_dir: Path, foreign: Foreign,
) -> None:
    server = EmbeddedServer(long_dir)
    foreign.start(server.socket_path)
    os.chown(server.socket_path, NOBODY, NOBODY)

    with pytest.raises(EmbeddedServerError, match=f"uid {NOBODY}"):
        server.start()
    assert not server.owned


def test_stop_sends_no_shutdown_to_a_server_it_did_not_start(
    long_dir: Path, foreign: Foreign,
) -> None:
    server = EmbeddedServer(long_dir)
    foreign.start(server.socket_path)

    with pytest.raises(EmbeddedServerError, match="not started by cogworker"):
        server.stop()
    assert foreign.alive()


def test_its_own_server_is_found_by_every_process(long_dir: Path) -> None:
    """The checks pass for the server cogworker started: found again, by a new object
    (another process does the same), and stopped."""
    first = EmbeddedServer(long_dir)
    url = first.start()
    assert first.owned
    again = EmbeddedServer(long_dir)
    assert again.start() == url
    assert not again.owned
    assert again.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a socket to another user needs root")
async def test_a_running_client_refuses_a_socket_put_there_after_its_server_stopped(
    long_dir: Path, foreign: Foreign,
) -> None:
    app = _app(long_dir)
    try:
        assert await app.enqueue("pay", "1") is not None
        server = EmbeddedServer(long_dir)
        assert server.stop()  # its socket is gone: anyone may bind that path now
        foreign.start(server.socket_path)
        os.chown(server.socket_path, NOBODY, NOBODY)

        # redis-py says it as a connection error, the refusal's words inside
        with pytest.raises(redis.exceptions.ConnectionError, match=f"uid {NOBODY}"):
            await app.enqueue("pay", "4242 4242 4242 4242")
    finally:
        await app.close()
    assert foreign.keys() == 0
