"""Harness of the Redis Sentinel tests: a private master, replica and three sentinels
per test (tests/sentinel_harness.py), worker processes on the ``redis+sentinel://`` URL
running the real CLI, and the jobs of tests/worker/chaos/redisfaults/faultapp.py, which record
every start and finish on a *witness* server that no failover ever touches.

Sizes and figures follow the chaos suites (tests/worker/chaos/redisfaults/conftest.py): the
default run is short, ``COGWORKER_CHAOS=full`` runs the big versions, and every
scenario prints one ``CHAOS <scenario> {json}`` line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final

import pytest
import redis.asyncio

from tests.sentinel_harness import SentinelTopology
from tests.servers import ServerProcess
from tests.worker.chaos.redisfaults import faultapp
from tests.worker.chaos.redisfaults.conftest import SETTINGS, TARGET, Witness
from tests.workerproc import WorkerProcess, worker_pool

WORKER_SETTINGS: Final[dict[str, Any]] = dict(SETTINGS)
"""The redisfaults workers' fast beats and recovery: a live worker on a busy 2-core
machine is never taken for dead, a dead one is recovered within seconds."""


@pytest.fixture
def topology() -> Iterator[SentinelTopology]:
    """This test's own master, replica and three sentinels (tests fail them over)."""
    with SentinelTopology() as started:
        yield started


@pytest.fixture(scope="package")
def witness_server() -> Iterator[ServerProcess]:
    server = ServerProcess().start()
    yield server
    server.cleanup()


@pytest.fixture
async def witness(witness_server: ServerProcess, namespace: str) -> AsyncIterator[Witness]:
    client = redis.asyncio.Redis.from_url(witness_server.url)
    yield Witness(client, namespace)
    await client.aclose()


StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def start_worker(witness_server: ServerProcess, namespace: str) -> Iterator[StartWorker]:
    """``start_worker(url, *cli_args, **settings)``: a running worker process on ``url``
    (WORKER_SETTINGS overridden by ``settings``), recording its runs on the witness;
    killed by pid at teardown, its log printed."""
    with worker_pool() as workers:
        def start(url: str, *args: str, **settings: Any) -> WorkerProcess:
            worker = WorkerProcess(url, namespace, {**WORKER_SETTINGS, **settings},
                                   list(args), target=TARGET,
                                   env={faultapp.WITNESS_ENV: witness_server.url})
            workers.append(worker)
            return worker.start()
        yield start


@pytest.fixture
async def make_jobs(namespace: str) -> AsyncIterator[Callable[..., faultapp.Jobs]]:
    """``make_jobs(url, **settings)``: the job app on ``url``, to enqueue from the test."""
    built: list[faultapp.Jobs] = []

    def make(url: str, **settings: Any) -> faultapp.Jobs:
        jobs = faultapp.build(url, namespace, **settings)
        built.append(jobs)
        return jobs

    yield make
    for jobs in built:
        await jobs.app.close()
