"""The admin CLI under test: ``cogworker_async.cli.cli`` through typer's CliRunner, on the
session's private Redis and the test's namespace.

These tests are plain functions, not coroutines: each command runs its own event loop
(``anyio.run``), which cannot start inside a running one. Data is prepared the same
way, through the real enqueue and worker paths, each step in an ``anyio.run`` of its own.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

import anyio
import pytest
from typer.testing import CliRunner, Result

from cogworker_async.admin import Inspector
from cogworker_async.cli import cli
from tests.cli import adminapp
from tests.waiting import wait_until

T = TypeVar("T")

WORK_TIMEOUT: Final = 15.0
"""Seconds a worker may take to settle the jobs a test gave it (a busy 2-core machine)."""
THREAD_JOIN: Final = 15.0
WIDE: Final = "200"
"""Terminal columns for the tables: each row on one line, tokens never folded."""


@pytest.fixture
def jobs(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> adminapp.Jobs:
    """The job app on the test's namespace; the CLI's copy reads the same from the env."""
    monkeypatch.setenv("COGWORKER_REDIS_URL", redis_url)
    monkeypatch.setenv(adminapp.NAMESPACE_ENV, namespace)
    monkeypatch.setenv("COLUMNS", WIDE)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    return adminapp.build(namespace, redis_url)


def invoke(command: str, *args: str, answer: str | None = None) -> Result:
    """``cogworker-async COMMAND tests.cli.adminapp:jobs ARGS...``."""
    return CliRunner().invoke(cli, [command, adminapp.TARGET, *args], input=answer)


def invoke_json(command: str, *args: str) -> Any:
    result = invoke(command, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # stdout holds the JSON and nothing else


def in_loop(jobs: adminapp.Jobs, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` in an event loop of its own, then close the App's pool for it."""

    async def main() -> T:
        try:
            return await work()
        finally:
            await jobs.app.close()

    return anyio.run(main)


def work_until(jobs: adminapp.Jobs, done: Callable[[Inspector], Awaitable[bool]]) -> None:
    """Run a worker until ``done(inspector)``; it stops gracefully (flushing its stats)."""

    async def main() -> None:
        insp = Inspector(jobs.app)
        async with jobs.app.worker():
            await wait_until(lambda: done(insp), timeout=WORK_TIMEOUT)

    in_loop(jobs, main)


def sizes(**expected: int) -> Callable[[Inspector], Awaitable[bool]]:
    """A ``work_until`` condition: each named set (scheduled, retries, dead) at its size."""

    async def reached(insp: Inspector) -> bool:
        for name, size in expected.items():
            if await insp.job_set(name).size() != size:
                return False
        return True

    return reached


@contextmanager
def worker_thread(jobs: adminapp.Jobs) -> Iterator[None]:
    """A worker in a thread of this process (its own loop), while the test runs the CLI.
    ``hold`` jobs it runs end when the block does."""
    stop = threading.Event()
    worker_jobs = adminapp.build(jobs.app.settings.namespace, jobs.app.redis_url())

    async def serve() -> None:
        try:
            async with worker_jobs.app.worker():
                while not stop.is_set():
                    await anyio.sleep(0.01)
        finally:
            await worker_jobs.app.close()

    thread = threading.Thread(target=anyio.run, args=(serve,), name="admin-cli-worker")
    thread.start()
    try:
        yield
    finally:
        adminapp.release.set()
        stop.set()
        thread.join(THREAD_JOIN)
        adminapp.release.clear()
        assert not thread.is_alive(), "the worker thread did not stop"


def eventually(condition: Callable[[], bool], timeout: float = WORK_TIMEOUT) -> None:
    """Return once ``condition()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.05)
