"""``rediss://`` with the TLS options as query parameters of the URL: a worker (its
heartbeat thread included), an enqueuer, the dashboard and the admin CLI all connect
with the one URL, to a server that listens on TLS only — with a CA alone, and with a
client certificate where the server requires one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
import redis
import redis.asyncio
from typer.testing import CliRunner

from cogworker_async import App
from cogworker_async.cli import cli
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.web import create_dashboard
from tests.redis.deploy import deployapp
from tests.redis.deploy.conftest import StartWorker, TLSServer, make_certs, wait_ran
from tests.web.conftest import BASE_URL
from tests.worker.e2e.conftest import wait_ready

pytestmark = pytest.mark.slow


@pytest.fixture
def tls_optional(certs: Path) -> Iterator[TLSServer]:
    server = TLSServer(certs, auth_clients="optional").start()
    yield server
    server.cleanup()


@pytest.fixture
def tls_required(certs: Path) -> Iterator[TLSServer]:
    server = TLSServer(certs, auth_clients="yes").start()
    yield server
    server.cleanup()


async def _worker_runs_a_job_over(url: str, start_worker: StartWorker) -> None:
    """A worker and an enqueuer on ``url``: the job runs, the worker beats, and the
    dashboard and the admin CLI read it all through the same URL."""
    client = redis.asyncio.Redis.from_url(url)
    try:
        worker = start_worker(url, url)
        await wait_ready(client, deployapp.NAMESPACE, worker)
        # The heartbeat thread has its own (blocking) client, made from the same URL.
        (identity,) = [as_bytes(name).decode() for name in
                       await client.hkeys(Keys(deployapp.NAMESPACE).beats)]

        jobs = deployapp.build(url, deployapp.NAMESPACE)
        try:
            await jobs.record.enqueue("over-tls")
            await jobs.record.enqueue_in(0.1, "scheduled-over-tls")
            await wait_ran(client, worker, lambda tags: sorted(tags) == [
                "over-tls", "scheduled-over-tls"])
            await _dashboard_shows(jobs.app, identity)
        finally:
            await jobs.app.close()
        stats = await anyio.to_thread.run_sync(_cli_stats, url)
        assert stats["processes"] == 1
        await worker.stop()
    finally:
        await client.aclose()


async def _dashboard_shows(app: App, identity: str) -> None:
    """The dashboard's Busy page, read over the App's URL, lists the worker."""
    transport = httpx.ASGITransport(app=create_dashboard(app))
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        response = await http.get("/busy")
    assert response.status_code == 200, response.text
    assert identity in response.text


def _cli_stats(url: str) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["stats", deployapp.ADMIN_TARGET, "--redis-url", url,
                                      "--json"])
    assert result.exit_code == 0, result.output
    found: dict[str, object] = json.loads(result.stdout)
    return found


async def test_rediss_with_a_ca(
    tls_optional: TLSServer, certs: Path, start_worker: StartWorker
) -> None:
    url = tls_optional.url_with(ssl_ca_certs=certs / "ca.pem")
    await _worker_runs_a_job_over(url, start_worker)


async def test_rediss_with_a_client_certificate(
    tls_required: TLSServer, certs: Path, start_worker: StartWorker
) -> None:
    url = tls_required.url_with(ssl_ca_certs=certs / "ca.pem",
                                ssl_certfile=certs / "client.pem",
                                ssl_keyfile=certs / "client.key",
                                ssl_cert_reqs="required")
    await _worker_runs_a_job_over(url, start_worker)

    # The server really requires the certificate: without it, nothing connects.
    bare = redis.asyncio.Redis.from_url(tls_required.url_with(ssl_ca_certs=certs / "ca.pem"))
    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            await bare.ping()
    finally:
        await bare.aclose()


async def test_rediss_checks_the_server_certificate(
    tls_optional: TLSServer, tmp_path: Path
) -> None:
    """A CA that did not sign the server's certificate: refused, not trusted blindly."""
    other = make_certs(tmp_path)
    client = redis.asyncio.Redis.from_url(tls_optional.url_with(ssl_ca_certs=other / "ca.pem"))
    try:
        with pytest.raises(redis.exceptions.ConnectionError, match="certificate verify failed"):
            await client.ping()
    finally:
        await client.aclose()
