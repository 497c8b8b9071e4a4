"""Harness of the network-partition tests (netlab.py: namespaces, veth links, nftables).

Each test gets its own ``Lab``: a private redis-server in namespace ``srv``, one
namespace per peer (a worker, an enqueuer) with its own faultable link to ``srv``, and
the never-faulted control link the test process uses to enqueue, read and count. Worker
processes run the real CLI inside their namespace (``NsWorker``), record their runs in a
witness file (netapp.py: no network involved), and are killed by pid at teardown, their
logs printed if the test failed. Every namespace and device is deleted at teardown.

The whole directory is skipped, saying why, without root, ``ip`` or ``nft``, or where a
namespace cannot be made (on Debian: ``apt-get install -y nftables``).

Sizes: the default run is short; ``COGWORKER_CHAOS=full`` runs the full scenarios (and
marks them ``chaos``, so ``make chaos`` picks them up and ``make test`` leaves them out).
Every scenario prints its figures as one line: ``CHAOS <scenario> [scale] {json}``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import pytest
import redis.asyncio

from tests.worker.chaos.netns import netapp, netlab
from tests.worker.chaos.netns.netlab import Lab
from tests.worker.chaos.processes.conftest import identity_of
from tests.worker.chaos.redisfaults.conftest import SETTINGS as FAULT_SETTINGS
from tests.worker.e2e import jobsapp
from tests.workerproc import ROOT, WorkerProcess

FULL: Final = os.environ.get("COGWORKER_CHAOS", "").strip().lower() == "full"
SCALE: Final = "full" if FULL else "short"
TARGET: Final = "tests.worker.chaos.netns.netapp:jobs"
LOG_TAIL: Final = 80

SETTINGS: Final[dict[str, Any]] = dict(FAULT_SETTINGS)
"""Fast, but not so fast that a busy 2-core machine makes a live worker look dead: the
Redis-fault suite's (tests/worker/chaos/redisfaults/conftest.py)."""


def size(short: int, full: int) -> int:
    return full if FULL else short


def marks(*, short_timeout: float, full_timeout: float) -> list[pytest.MarkDecorator]:
    """A scenario module's ``pytestmark``: slow, a time limit, and ``chaos`` when full."""
    found = [pytest.mark.slow, pytest.mark.timeout(full_timeout if FULL else short_timeout)]
    if FULL:
        found.append(pytest.mark.chaos)
    return found


def report(scenario: str, **figures: Any) -> None:
    """The scenario's figures, one JSON line (seen with ``pytest -s`` or on failure)."""
    print(f"CHAOS {scenario} [{SCALE}] {json.dumps(figures, sort_keys=True, default=str)}")


@pytest.fixture(scope="session", autouse=True)
def _netns_available() -> None:
    reason = netlab.unavailable()
    if reason is not None:
        pytest.skip(f"network-partition tests: {reason}")
    netlab.clean_leftovers()


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    if rep.when == "call":
        item.stash[_FAILED] = rep.failed
    return rep


@pytest.fixture
def make_lab() -> Iterator[Callable[..., Lab]]:
    """``make_lab(peers)``: a lab with a namespace and link per peer role and its
    redis-server running; destroyed (processes killed, namespaces deleted) at teardown."""
    labs: list[Lab] = []

    def make(peers: Sequence[str]) -> Lab:
        lab = Lab(list(peers))
        labs.append(lab)
        lab.create()
        lab.start_redis()
        return lab

    yield make
    for lab in labs:
        lab.destroy()


@pytest.fixture
async def control() -> AsyncIterator[Callable[[Lab], redis.asyncio.Redis]]:
    """``control(lab)``: a plain client of the lab's Redis over the control link."""
    made: list[redis.asyncio.Redis] = []

    def make(lab: Lab) -> redis.asyncio.Redis:
        client = redis.asyncio.Redis.from_url(lab.control_url)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()


@pytest.fixture
def witness_path(tmp_path: Path) -> Path:
    return tmp_path / "witness.jsonl"


class NsWorker(WorkerProcess):
    """``cogworker-async run tests.worker.chaos.netns.netapp:jobs`` inside a namespace."""

    def __init__(self, ns: str, url: str, namespace: str, settings: dict[str, Any],
                 args: list[str], witness: Path) -> None:
        super().__init__(url, namespace, settings, args, target=TARGET,
                         env={netapp.WITNESS_ENV: str(witness)})
        self.ns = ns
        self.identity = ""

    def start(self) -> NsWorker:
        env = dict(os.environ)
        env.pop("COGWORKER_REDIS_URL", None)
        env.update({
            jobsapp.URL_ENV: self.redis_url,
            jobsapp.NAMESPACE_ENV: self.namespace,
            jobsapp.SETTINGS_ENV: json.dumps(self.settings),
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        })
        command = [sys.executable, "-m", "cogworker_async", "run", self.target, *self.args]
        with self.log_path.open("wb") as log:
            self.process = netlab.popen(self.ns, command, env=env, cwd=ROOT, stdout=log)
        return self


StartWorker = Callable[..., NsWorker]


@pytest.fixture
def start_worker(request: pytest.FixtureRequest, namespace: str,
                 witness_path: Path) -> Iterator[StartWorker]:
    """``start_worker(ns, url, *cli_args, **settings)``: a worker in namespace ``ns`` on
    ``url`` (SETTINGS overridden by ``settings``), recording its runs in the witness."""
    workers: list[NsWorker] = []

    def start(ns: str, url: str, *args: str, **settings: Any) -> NsWorker:
        worker = NsWorker(ns, url, namespace, {**SETTINGS, **settings},
                          ["--log-level", "WARNING", *args], witness_path)
        workers.append(worker)
        return worker.start()

    try:
        yield start
    finally:
        for worker in workers:
            worker.kill()
        if request.node.stash.get(_FAILED, True):
            for worker in workers:
                if worker.process is not None:
                    tail = "\n".join(worker.log().splitlines()[-LOG_TAIL:])
                    print(f"--- worker {worker.pid} in {worker.ns} "
                          f"(exit {worker.returncode}) ---\n{tail}")
        for worker in workers:
            worker.cleanup()


async def identify(r: redis.asyncio.Redis, namespace: str, *workers: NsWorker) -> None:
    """Fill in each worker's identity (from its beat, over the control link)."""
    for worker in workers:
        worker.identity = await identity_of(r, namespace, worker)
