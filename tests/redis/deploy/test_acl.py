"""The ACL users documented in docs/deployment.md, created exactly as written there,
are enough: a worker, an enqueuer and the dashboard and admin CLI each do their whole
job, and Redis refuses nothing (its ACL LOG stays empty) — on a single Redis, and on a
Redis Cluster with the lines run on every node.

The lines are read out of the document, so the document and this test cannot drift.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, Final

import anyio
import httpx
import pytest
import redis
import redis.asyncio
from typer.testing import CliRunner

from cogworker_async import App
from cogworker_async.admin import Inspector
from cogworker_async.cli import cli
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.redis.keys import Keys
from cogworker_async.web import create_dashboard
from tests.cluster_harness import ClusterProcess
from tests.redis.deploy import deployapp
from tests.redis.deploy.conftest import (
    StartWorker,
    credentials,
    documented_acl_lines,
    ran,
    wait_ran,
)
from tests.servers import ServerProcess
from tests.waiting import wait_until
from tests.web.conftest import BASE_URL, page_token
from tests.worker.e2e.conftest import wait_ready
from tests.worker.e2e.jobsapp import FAST

pytestmark = pytest.mark.slow

ROLES: Final = ("cogworker-worker", "cogworker-enqueuer", "cogworker-admin")
PARKED: Final = "parked"
"""A queue no worker fetches from: its jobs wait there for the dashboard to act on."""
KEYS: Final = Keys(deployapp.NAMESPACE)
FAR: Final = 3600.0
"""Seconds ahead a job is scheduled that must still be waiting when the dashboard acts."""
# A queue's page of the App's own queue: the dashboard has cleared PARKED by then, and a
# queue neither the App nor Redis knows any more is refused (a typo's safeguard).
CLI_COMMANDS: Final = (("stats",), ("queues",), ("queues", "default"), ("scheduled",),
                       ("retries",), ("dead",), ("dead", "--search", "boom"),
                       ("processes",), ("periodic",))


@pytest.fixture
async def urls(server: ServerProcess,
               admin_client: redis.asyncio.Redis) -> dict[str, str]:
    """Role -> URL, once the documented users exist on the server."""
    found = {}
    for line in documented_acl_lines():
        await admin_client.execute_command(*line)  # type: ignore[no-untyped-call]
        user, password = credentials(line)
        found[user] = f"redis://{user}:{password}@127.0.0.1:{server.port}/0"
    assert sorted(found) == sorted(ROLES), "docs/deployment.md names other users"
    return found


@pytest.fixture
async def board(urls: dict[str, str]) -> AsyncIterator[App]:
    """The dashboard's App, connected as the documented admin user."""
    app = App(urls["cogworker-admin"], namespace=deployapp.NAMESPACE)
    yield app
    await app.close()


async def test_documented_users_suffice_for_every_role(
    urls: dict[str, str], board: App, server: ServerProcess,
    admin_client: redis.asyncio.Redis, start_worker: StartWorker,
) -> None:
    worker = start_worker(urls["cogworker-worker"], server.url, periodic=True)
    await wait_ready(admin_client, deployapp.NAMESPACE, worker)

    await _enqueue_everything(urls["cogworker-enqueuer"])
    await wait_ran(admin_client, worker, lambda tags: _all_ran(tags, fail_runs=2))
    await wait_until(lambda: _dead_size(admin_client, 1))

    await _drive_dashboard(board, admin_client, worker)
    outputs = await anyio.to_thread.run_sync(_run_cli, urls["cogworker-admin"])
    await worker.stop()

    denied = await admin_client.acl_log()
    assert denied == [], "\n".join(_denial(entry) for entry in denied)
    assert json.loads(outputs["stats"])["processes"] == 1  # the worker, seen by its beats
    assert deployapp.TICK in outputs["periodic"]
    # The dead job retried from the dashboard ran a third time.
    assert Counter(await ran(admin_client))["bad"] == 3


_EXPECTED: Final = ("now", "later", "unique", "unique-later", "many-1", "many-2", "urgent",
                    "grouped", "throttled", "debounced", "coalesced", "sync", "in-batch-1",
                    "in-batch-2", "batch-done", "chain-1", "chain-2")


async def _enqueue_everything(url: str) -> None:
    jobs = deployapp.build(url, deployapp.NAMESPACE)
    try:
        assert await jobs.record.enqueue("now")
        assert await jobs.record.enqueue_in(0.2, "later")
        assert await jobs.unique.enqueue("unique")
        assert await jobs.unique.enqueue_in(0.2, "unique-later")  # its schedule's type read
        assert len(await jobs.record.enqueue_many([(("many-1",), {}), (("many-2",), {})])) == 2
        assert await jobs.record.options(priority=7).enqueue("urgent")  # its priority's list
        assert await jobs.record.options(group="acme").enqueue("grouped")  # a group's list
        assert await jobs.record.options(throttle=60, key="t").enqueue("throttled")
        assert await jobs.record.options(debounce=0.2, key="d").enqueue("debounced")
        assert await jobs.record.options(coalesce=True, key="c").enqueue("coalesced")
        assert await jobs.fail.enqueue("bad")
        assert await anyio.to_thread.run_sync(jobs.record.enqueue_sync, "sync")
        # A batch: its keys and scripts (the worker relays its ends, enqueues its callback).
        async with jobs.app.batch(on_complete=jobs.record.s("batch-done")):
            assert await jobs.record.enqueue("in-batch-1")
            assert await jobs.record.enqueue_many([(("in-batch-2",), {})])
        # Waiting for the dashboard: a queue nobody fetches, and the far schedule.
        for tag in ("parked-1", "parked-2", "parked-3"):
            await jobs.record.options(queue=PARKED).enqueue(tag)
        far = await jobs.record.enqueue_in(FAR, "far")
        # A chain, and a job waiting for the far one, cancelled: the dependency scripts.
        assert len(await jobs.app.chain(jobs.record.s("chain-1"),
                                        jobs.record.s("chain-2")).enqueue()) == 2
        assert far is not None
        waiting = await jobs.record.options(after=[far]).enqueue("never")
        assert waiting is not None
        assert await jobs.app.cancel(waiting) == "cancelled"
    finally:
        await jobs.app.close()


def _all_ran(tags: list[str], *, fail_runs: int) -> bool:
    counts = Counter(tags)
    return (all(counts[tag] == 1 for tag in _EXPECTED) and counts["bad"] == fail_runs
            and counts[deployapp.TICK] >= 1)


async def _dead_size(client: redis.asyncio.Redis, size: int) -> bool:
    """The default queue's dead set (the failing job's queue) holds ``size`` entries."""
    return int(await client.zcard(KEYS.dead("default"))) == size


async def _drive_dashboard(board: App, admin_client: redis.asyncio.Redis,
                           worker: Any) -> None:
    """Every page, then retry, kill and delete entries and clear a queue, as the admin."""
    insp = Inspector(board)
    transport = httpx.ASGITransport(app=create_dashboard(board))
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        for path in ("/", "/stats.json", "/queues", f"/queues/{PARKED}", "/busy",
                     "/scheduled", "/retries", "/dead", "/dead?q=boom", "/periodic"):
            response = await http.get(path)
            assert response.status_code == 200, f"{path}: {response.text}"
        csrf = await page_token(http, "/dead")

        (dead,) = (await insp.dead.page()).items
        await _post(http, "/dead/retry", csrf, token=dead.token)  # runs, fails, dead again
        await wait_ran(admin_client, worker, lambda tags: _all_ran(tags, fail_runs=3))
        await wait_until(lambda: _dead_size(admin_client, 1))

        (far,) = (await insp.scheduled.page()).items
        await _post(http, "/scheduled/kill", csrf, token=far.token)
        assert await insp.dead.size() == 2
        newest = (await insp.dead.page()).items[0]
        await _post(http, "/dead/delete", csrf, token=newest.token)
        await _post(http, "/dead/delete", csrf, all="1")
        assert await insp.dead.size() == 0

        parked = (await insp.queue(PARKED).page()).items[0]
        await _post(http, f"/queues/{PARKED}/delete", csrf, token=parked.token)
        await _post(http, f"/queues/{PARKED}/clear", csrf)
        assert (await insp.queue(PARKED).info()).size == 0
        for action, said in (("pause", "paused"), ("resume", "resumed")):
            response = await http.post(f"/queues/{PARKED}/{action}", data={"csrf_token": csrf})
            assert response.status_code == 303, f"{action}: {response.text}"
            assert response.headers["location"].endswith(f"pause={said}")


async def _post(http: httpx.AsyncClient, path: str, csrf: str, **fields: str) -> None:
    response = await http.post(path, data={"csrf_token": csrf, **fields})
    assert response.status_code == 303, f"{path}: {response.status_code} {response.text}"
    assert "did=" in response.headers["location"] or "done" in response.headers["location"]


def _run_cli(url: str) -> dict[str, str]:
    """Each read-only admin command, as the admin user; command -> its JSON output."""
    outputs = {}
    for command in CLI_COMMANDS:
        result = CliRunner().invoke(
            cli, [command[0], deployapp.ADMIN_TARGET, *command[1:], "--redis-url", url,
                  "--json"])
        assert result.exit_code == 0, f"{command}: {result.output}"
        outputs[" ".join(command)] = result.stdout
    return outputs


def _denial(entry: dict[str, Any]) -> str:
    return (f"{entry.get('username')}: {entry.get('reason')} {entry.get('object')!r} "
            f"in {entry.get('context')} (x{entry.get('count')})")


# -- the same lines on a Redis Cluster ---------------------------------------------------

CLUSTER_QUEUES: Final = ("default", "other", "third")
"""Queues whose slots a 3-master cluster spreads over its nodes."""


@pytest.fixture
def cluster() -> Iterator[ClusterProcess]:
    """A cluster of this test's own (its users and its ACL LOG): 3 masters, no replicas."""
    with ClusterProcess(masters=3, replicas=0) as started:
        yield started


def _cluster_urls(cluster: ClusterProcess) -> dict[str, str]:
    """Role -> ``redis+cluster://`` URL, once every node has the documented users."""
    found = {}
    for port in cluster.ports:
        with redis.Redis(port=port) as node:
            for line in documented_acl_lines():
                node.execute_command(*line)
            node.acl_log_reset()
    seeds = ",".join(f"127.0.0.1:{port}" for _, port in cluster.masters())
    for line in documented_acl_lines():
        user, password = credentials(line)
        found[user] = f"redis+cluster://{user}:{password}@{seeds}"
    return found


def _cluster_app(url: str, ran: list[str]) -> tuple[App, JobFunction[[str], Awaitable[None]],
                                                     JobFunction[[str], Awaitable[None]]]:
    app = App(url, namespace=deployapp.NAMESPACE, queues=list(CLUSTER_QUEUES), **FAST)

    async def record(tag: str) -> None:
        ran.append(tag)

    async def fail(tag: str) -> None:
        ran.append(tag)
        raise RuntimeError(f"boom {tag}")

    return (app, app.job(name="record")(record),
            app.job(name="fail", retry=False, unique=True)(fail))


async def test_documented_users_suffice_on_a_cluster(cluster: ClusterProcess) -> None:
    """Each role over a ``redis+cluster://`` URL, with the lines run on every node: jobs
    on queues of different nodes are enqueued, scheduled, run, filed in dead, read and
    deleted from the dashboard's model, and no node refuses anything."""
    urls = _cluster_urls(cluster)
    ran: list[str] = []
    enqueuer, record, fail = _cluster_app(urls["cogworker-enqueuer"], ran)
    try:
        for queue in CLUSTER_QUEUES:
            assert await record.options(queue=queue).enqueue(queue)
        assert await record.enqueue_in(0.1, "later")
        assert len(await record.options(queue="other").enqueue_many(
            [(("many-1",), {}), (("many-2",), {})])) == 2
        assert await fail.options(queue="third").enqueue("bad")
    finally:
        await enqueuer.close()

    worker, _, _ = _cluster_app(urls["cogworker-worker"], ran)
    try:
        async with worker.worker(concurrency=2):
            await wait_until(lambda: sorted(ran) == sorted(
                [*CLUSTER_QUEUES, "later", "many-1", "many-2", "bad"]))
    finally:
        await worker.close()

    board, _, _ = _cluster_app(urls["cogworker-admin"], ran)
    try:
        insp = Inspector(board)
        summary = await insp.summary()
        assert summary["dead"] == 1
        await insp.processes.all()
        await insp.scheduled.page()
        (dead,) = (await insp.dead.page()).items
        assert dead.home == "third"
        assert (await insp.dead.delete([dead.token])).done == 1
        assert await insp.dead.size() == 0
    finally:
        await board.close()

    for port in cluster.ports:
        with redis.Redis(port=port) as node:
            denied = node.acl_log()
        assert denied == [], "\n".join(_denial(entry) for entry in denied)
