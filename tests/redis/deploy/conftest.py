"""Deployment harness: private servers set up as production ones are (ACL users, TLS),
a worker subprocess running the real CLI as the user under test, and the server's
default user (``admin_client``) to set up and to read what happened.

Every server and worker a test starts is stopped by pid at teardown; a worker's log is
printed, so a failing test shows what the worker said.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Final
from urllib.parse import urlencode

import pytest
import redis
import redis.asyncio
import trustme

from cogworker_async.redis.liveness import as_bytes
from tests.redis.deploy import deployapp
from tests.servers import START_TIMEOUT, ServerProcess, server_binary
from tests.waiting import wait_until
from tests.workerproc import WorkerProcess, worker_pool

ROOT: Final = Path(__file__).resolve().parents[3]
DEPLOYMENT_DOC: Final = ROOT / "docs" / "deployment.md"
WORK_TIMEOUT: Final = 15.0
"""Seconds a worker may take to start and run a test's jobs (a busy 2-core machine)."""

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    """A private server of this test's own: it gets users (and its ACL LOG) of its own."""
    started = ServerProcess().start()
    yield started
    started.cleanup()


@pytest.fixture
async def admin_client(server: ServerProcess) -> AsyncIterator[redis.asyncio.Redis]:
    """The server's default user: sets up users, reads outcomes (raw bytes)."""
    client = redis.asyncio.Redis.from_url(server.url)
    yield client
    await client.aclose()


@pytest.fixture
def start_worker() -> Iterator[StartWorker]:
    """``start_worker(url, record_url, periodic=False, **settings)``: a worker process
    in namespace ``cogworker`` connecting with ``url``; its jobs record through
    ``record_url``."""
    with worker_pool() as workers:
        def start(url: str, record_url: str, *, periodic: bool = False,
                  **settings: object) -> WorkerProcess:
            env = {deployapp.RECORD_URL_ENV: record_url,
                   deployapp.PERIODIC_ENV: "1" if periodic else "0"}
            worker = WorkerProcess(url, deployapp.NAMESPACE, dict(settings), [],
                                   target=deployapp.TARGET, env=env)
            workers.append(worker)
            return worker.start()
        yield start


async def ran(client: redis.asyncio.Redis) -> list[str]:
    """Tags of the finished runs, in order."""
    return [as_bytes(tag).decode() for tag in await client.lrange(deployapp.RAN_KEY, 0, -1)]


async def wait_ran(client: redis.asyncio.Redis, worker: WorkerProcess,
                   wanted: Callable[[list[str]], bool]) -> None:
    """Until ``wanted(ran)``; fails at once, with the worker's log, if the worker exits."""

    async def check() -> bool:
        assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        return wanted(await ran(client))

    try:
        await wait_until(check, timeout=WORK_TIMEOUT)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; ran: {await ran(client)}") from None


def documented_acl_lines() -> list[list[str]]:
    """Every ``ACL SETUSER`` line of docs/deployment.md, split as a shell would."""
    lines = DEPLOYMENT_DOC.read_text().splitlines()
    return [shlex.split(line) for line in lines if line.startswith("ACL SETUSER ")]


def credentials(acl_line: list[str]) -> tuple[str, str]:
    """(user, password) an ``ACL SETUSER`` line creates."""
    passwords = [word[1:] for word in acl_line if word.startswith(">")]
    assert len(passwords) == 1, f"one password per documented user: {acl_line}"
    return acl_line[2], passwords[0]


class TLSServer(ServerProcess):
    """A private server that listens on TLS only (``--port 0``), on ``self.port``.

    ``auth_clients``: ``"optional"`` (a client certificate is checked if given) or
    ``"yes"`` (required). ``certs`` holds ``ca.pem``, ``server.pem`` and ``server.key``
    (``make_certs``); ``client.pem`` and ``client.key`` are the client's."""

    def __init__(self, certs: Path, *, auth_clients: str) -> None:
        super().__init__()
        self.certs = certs
        self.auth_clients = auth_clients

    @property
    def url(self) -> str:
        """``rediss://`` with the CA and, always, the client certificate (the server
        asks for it only when it requires it)."""
        return self.url_with(ssl_ca_certs=self.certs / "ca.pem",
                             ssl_certfile=self.certs / "client.pem",
                             ssl_keyfile=self.certs / "client.key")

    def url_with(self, **query: object) -> str:
        """``rediss://127.0.0.1:<port>/0`` with ``query`` (percent-encoded) as options."""
        return f"rediss://127.0.0.1:{self.port}/0?" + urlencode(
            {name: str(value) for name, value in query.items()})

    def start(self) -> TLSServer:
        certs = self.certs
        args = [
            server_binary(), "--port", "0", "--tls-port", str(self.port),
            "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
            "--appendonly", "no", "--daemonize", "no",
            "--logfile", str(self.dir / "server.log"),
            "--tls-cert-file", str(certs / "server.pem"),
            "--tls-key-file", str(certs / "server.key"),
            "--tls-ca-cert-file", str(certs / "ca.pem"),
            "--tls-auth-clients", self.auth_clients,
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    log = (self.dir / "server.log").read_text(errors="replace")
                    raise RuntimeError(f"TLS test server exited:\n{log}")
                with contextlib.suppress(redis.exceptions.RedisError):
                    if client.ping():
                        return self
                time.sleep(0.02)
        finally:
            client.close()
        raise RuntimeError("TLS test server did not start in time")


def make_certs(directory: Path) -> Path:
    """A throwaway CA (trustme), a certificate for 127.0.0.1 and a client certificate."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    server = ca.issue_cert("127.0.0.1")
    server.private_key_pem.write_to_path(str(directory / "server.key"))
    server.cert_chain_pems[0].write_to_path(str(directory / "server.pem"))
    client = ca.issue_cert("client.example.org")
    client.private_key_pem.write_to_path(str(directory / "client.key"))
    client.cert_chain_pems[0].write_to_path(str(directory / "client.pem"))
    return directory


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))
