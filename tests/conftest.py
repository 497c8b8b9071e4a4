"""The session's servers and fixtures, and the tiers: every test is marked from what it
needs (``TIERS``), so that ``make test-fast`` can leave out what is slow to start.

A test's needs are read from its fixtures (the whole closure: a fixture that needs the
session server makes its users ``redis`` tests) and from its module: where it lives and
what its source names (a module that starts processes or its own servers). Reading them
rather than listing tests keeps the marks right as tests are added.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, Final

import pytest

import tests.hypothesis_profiles  # noqa: F401  (loads the profile every property test runs under)
from cogworker_async import App
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.cluster_harness import ClusterProcess
from tests.servers import ServerProcess

TESTS: Final = Path(__file__).resolve().parent

REDIS_FIXTURES: Final = frozenset({"redis_server", "redis_url", "store", "make_app", "keys",
                                   "redis_cluster"})
"""Fixtures that reach a server: their users are ``redis`` tests."""
# Each tier: the directories (paths under tests/) whose tests all need it, and words
# whose presence in a test module's source means the module does.
TIERS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "lua": (("redis/lua",), ()),
    "cluster": (("redis/cluster",), ("ClusterProcess", "redis_cluster", "cluster_harness")),
    "sentinel": (("redis/sentinel",), ("SentinelProcess", "sentinel_harness")),
    "root": (("worker/chaos/netns",), ("netlab",)),
    "browser": (("web/browser",), ("playwright",)),
    "processes": (("worker/e2e", "worker/chaos", "cli/supervisor", "redis/deploy",
                   "web/browser"),
                  ("subprocess", "Popen", "workerproc", "WorkerProcess",
                   "create_subprocess", "multiprocessing")),
    "redis": (("redis/lua", "redis/cluster", "redis/sentinel", "redis/deploy",
               "worker/chaos"),
              ("ServerProcess", "Store.from_url", "redis_url", "servers import")),
}


@cache
def _needs_of_module(path: Path) -> frozenset[str]:
    """The tiers a test module needs by where it lives and what it names."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
        source = path.read_text()
    except (ValueError, OSError):
        return frozenset()
    where = "/".join(parts[:-1]) + "/"
    return frozenset(tier for tier, (directories, words) in TIERS.items()
                     if any(where.startswith(f"{directory}/") for directory in directories)
                     or any(word in source for word in words))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the tiers it needs, ``pure`` when it needs none."""
    for item in items:
        needs = set(_needs_of_module(Path(item.path)))
        if REDIS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            needs.add("redis")
        callspec = getattr(item, "callspec", None)  # url_of_topology's "cluster" param
        if callspec is not None and any(value == "cluster" for value in callspec.params.values()):
            needs.add("cluster")
        if needs & {"cluster", "sentinel", "root", "lua"}:
            needs.add("redis")
        for tier in sorted(needs) or ["pure"]:
            item.add_marker(tier)


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


@pytest.fixture(scope="session", autouse=True)
def _stop_embedded_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The embedded server outlives the process that started it (it is the folder's):
    any a test left running in this session's temporary dirs is stopped at the end, so a
    test run leaves no server behind. Tests stop their own; this is the net.

    Every server a test starts records itself in a registry of this session's own (it
    and every process a test starts inherit the variable): the suite never touches the
    user's real one (``~/.cache/cogworker-async/embedded``)."""
    os.environ["COGWORKER_EMBEDDED_REGISTRY"] = str(tmp_path_factory.mktemp("registry"))
    yield
    from cogworker_async.redis.embedded import EmbeddedServer

    for pid_file in tmp_path_factory.getbasetemp().rglob("server.pid"):
        with contextlib.suppress(Exception):
            EmbeddedServer(pid_file.parent).stop()


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
