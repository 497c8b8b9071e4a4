"""A Redis user that may not run INFO or CONFIG: the worker still starts and works; the
start-up checks it cannot make are skipped, said once in one warning line."""

from __future__ import annotations

import logging

import pytest
import redis.asyncio

from cogworker_async.redis.connection import check_server
from tests.redis.deploy import deployapp
from tests.redis.deploy.conftest import StartWorker, wait_ran
from tests.servers import ServerProcess
from tests.worker.e2e.conftest import wait_ready

SKIPPED: str = "Redis start-up check skipped"


async def _add_user(client: redis.asyncio.Redis, name: str, *rules: str) -> None:
    """Everything on every key and channel, except ``rules`` take away."""
    await client.execute_command(  # type: ignore[no-untyped-call]
        "ACL", "SETUSER", name, "reset", "on", f">{name}-pw", "~*", "&*", "+@all", *rules)


def _url(server: ServerProcess, name: str) -> str:
    return f"redis://{name}:{name}-pw@127.0.0.1:{server.port}/0"


async def test_worker_without_info_or_config_runs_jobs_and_warns_once(
    server: ServerProcess, admin_client: redis.asyncio.Redis, start_worker: StartWorker
) -> None:
    await _add_user(admin_client, "limited", "-info", "-config")
    url = _url(server, "limited")
    worker = start_worker(url, server.url)
    await wait_ready(admin_client, deployapp.NAMESPACE, worker)

    jobs = deployapp.build(url, deployapp.NAMESPACE)
    try:
        await jobs.record.enqueue("works")
    finally:
        await jobs.app.close()
    await wait_ran(admin_client, worker, lambda tags: tags == ["works"])
    await worker.stop()

    warnings = [line for line in worker.log().splitlines() if SKIPPED in line]
    assert len(warnings) == 1, worker.log()
    (line,) = warnings
    assert "server version and maxmemory-policy" in line
    assert "NOPERM" in line
    # The user really lacked the permission: Redis logged the refusal.
    refused = {entry["object"] for entry in await admin_client.acl_log()}
    assert "info" in refused


async def test_without_config_the_policy_comes_from_info(
    server: ServerProcess, admin_client: redis.asyncio.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    await _add_user(admin_client, "noconfig", "-config")
    client = redis.asyncio.Redis.from_url(_url(server, "noconfig"))
    try:
        with caplog.at_level(logging.WARNING, logger="cogworker_async"):
            info = await check_server(client, reliable=True)
    finally:
        await client.aclose()
    assert info.maxmemory_policy == "noeviction"
    assert info.version is not None
    assert info.version >= (6, 2)
    assert info.skipped is None
    assert caplog.records == []
    assert await admin_client.acl_log() == []  # CONFIG was never tried
