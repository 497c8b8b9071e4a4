from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from cogworker_async import App
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.cluster_harness import ClusterProcess
from tests.servers import ServerProcess

# Settings that make a worker react within tens of milliseconds in tests.
FAST: dict[str, Any] = {
    "poll_interval": 0.05,
    "retry_base_delay": 0.0,
    "shutdown_timeout": 2.0,
    "idle_fetch_interval": 0.2,
    "heartbeat_interval": 0.2,
    "orphan_threshold": 1.0,
    "recovery_interval": 0.2,
}


@pytest.fixture(scope="session")
def redis_server() -> Iterator[ServerProcess]:
    """One private server for the whole session; tests keep apart by namespace."""
    server = ServerProcess().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ClusterProcess]:
    """One private 3-master cluster (a replica each) for the session, started on first
    use; tests keep apart by namespace, and those that kill a node start their own."""
    with ClusterProcess() as cluster:
        yield cluster


def url_of_topology(request: pytest.FixtureRequest) -> str:
    """The URL of the session's server (``request.param == "single"``) or cluster
    (``"cluster"``): for ``redis_url`` fixtures that run their tests on both, e.g.
    ``redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)``."""
    if request.param == "cluster":
        cluster: ClusterProcess = request.getfixturevalue("redis_cluster")
        return cluster.url
    server: ServerProcess = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
def redis_url(redis_server: ServerProcess) -> str:
    return redis_server.url


@pytest.fixture
def namespace() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def keys(namespace: str) -> Keys:
    return Keys(namespace)


@pytest.fixture
async def store(redis_url: str, namespace: str) -> AsyncIterator[Store]:
    s = Store.from_url(redis_url, namespace)
    yield s
    await s.aclose()


@pytest.fixture
async def make_app(redis_url: str, namespace: str) -> AsyncIterator[Callable[..., App]]:
    """``make_app(**settings)``: an App on the test server and namespace, fast settings."""
    apps: list[App] = []

    def factory(**overrides: Any) -> App:
        app = App(redis_url, namespace=namespace, **{**FAST, **overrides})
        apps.append(app)
        return app

    yield factory
    for app in apps:
        await app.close()
