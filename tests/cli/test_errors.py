"""``cogworker-async run`` errors a person can read: one ``error: ...`` line on stderr, no
traceback, the URL's password masked, and an exit code that tells the cases apart
(2: usage or configuration; 3: Redis unreachable or refusing; see cli.py). A Redis that
comes up after the worker is waited for, said once.

Each case runs the real entry point (``python -m cogworker_async``, through ``main``)
in a subprocess: what a person sees is the process's stderr and exit status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import anyio
import pytest
import redis
import redis.asyncio
import redis.exceptions

from cogworker_async.cli import EXIT_REDIS, EXIT_USAGE, explain
from cogworker_async.errors import ConfigurationError
from tests.servers import ServerProcess, free_port
from tests.waiting import wait_until
from tests.worker.e2e import jobsapp
from tests.workerproc import ROOT, TARGET, WorkerProcess, worker_pool

pytestmark = pytest.mark.slow

RUN_TIMEOUT: Final = 30.0
"""Seconds one failing command may take (imports on a busy 2-core machine)."""
REFUSAL_BOUND: Final = 8.0
"""Seconds within which a refusal (wrong password, NOPERM) ends the command: well under
the default 30 s a worker waits for a Redis that is merely not up yet."""
MOST_LINES: Final = 3
SECRET: Final = "s3cret-pw"
LATE_START: Final = 2.0
"""Seconds the server starts after the worker, in the wait-for-Redis test."""


def cli(*args: str, url: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``cogworker-async ARGS`` (the jobs app reads its URL from the environment)."""
    env = {k: v for k, v in os.environ.items() if k != "COGWORKER_REDIS_URL"}
    env.update({jobsapp.URL_ENV: url or f"redis://127.0.0.1:{free_port()}",
                jobsapp.NAMESPACE_ENV: "cli-errors", "PYTHONPATH": str(ROOT)})
    return subprocess.run([sys.executable, "-m", "cogworker_async", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)


def assert_readable(result: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """Exit ``code``; a short stderr ending in one ``error:`` line holding ``words``."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert 1 <= len(lines) <= MOST_LINES, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "│" not in result.stderr, result.stderr  # no rich traceback box either
    assert lines[-1].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[-1], result.stderr
    assert SECRET not in result.stderr + result.stdout
    return lines[-1]


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """Modules a user might point ``run`` at, each wrong in its own way."""
    (tmp_path / "raises_on_import.py").write_text("SETTING = {}\nSETTING['missing']\n")
    (tmp_path / "not_an_app.py").write_text("jobs = 42\n")
    (tmp_path / "shop.py").write_text("from cogworker_async import App\n\n"
                                      "job = 'not the App'\njobs = App()\n")
    return tmp_path


def test_an_app_module_that_raises_on_import_is_named_with_its_error_and_line(
    app_dir: Path,
) -> None:
    line = assert_readable(cli("run", "raises_on_import:jobs", cwd=app_dir), EXIT_USAGE,
                           "cannot import 'raises_on_import'", "KeyError", "'missing'")
    assert "raises_on_import.py:2" in line


def test_a_missing_module_or_a_target_that_is_not_an_app_is_a_usage_error(
    app_dir: Path,
) -> None:
    assert_readable(cli("run", "no_such_module:jobs", cwd=app_dir), EXIT_USAGE,
                    "No module named 'no_such_module'")
    assert_readable(cli("run", "not_an_app:jobs", cwd=app_dir), EXIT_USAGE,
                    "is not a cogworker_async.App", "int")


@pytest.mark.parametrize(("target", "says"), [
    ("shop:job", "did you mean shop:jobs?"),  # the App that is there, under its name
    ("shop:nothing", "did you mean shop:jobs?"),
    ("shop.py:jobs", "drop the .py: shop:jobs"),  # a module, not a file
])
def test_a_near_miss_target_names_the_one_that_works(
    app_dir: Path, target: str, says: str,
) -> None:
    assert_readable(cli("run", target, cwd=app_dir), EXIT_USAGE, says)


@pytest.mark.parametrize(("args", "says"), [
    (["--concurrency", "0"], "concurrency must be between 1 and 10,000"),
    (["--queue", ""], "invalid queue name ''"),
    (["--queue", "a b"], "invalid queue name 'a b'"),
    (["--log-level", "LOUD"], "unknown log level"),
    (["--redis-url", f"http://user:{SECRET}@127.0.0.1:1"], "unsupported Redis URL"),
])
def test_bad_settings_are_refused_before_anything_starts(args: list[str], says: str) -> None:
    assert_readable(cli("run", TARGET, *args), EXIT_USAGE, says)


def test_a_huge_concurrency_is_refused_at_once_without_allocating() -> None:
    began = time.monotonic()
    result = cli("run", TARGET, "--concurrency", "1000000000")
    assert_readable(result, EXIT_USAGE, "concurrency must be between 1 and 10,000",
                    "1,000,000,000")
    assert time.monotonic() - began < RUN_TIMEOUT / 2


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    """A private server of the test's own, to lock down."""
    started = ServerProcess().start()
    yield started
    started.cleanup()


def lock_down(server: ServerProcess, *command: str) -> None:
    """Configure the server through a client connected before the change."""
    with redis.Redis(port=server.port) as client:
        client.execute_command(*command)


def test_a_wrong_password_exits_3_at_once_with_the_url_masked(server: ServerProcess) -> None:
    lock_down(server, "CONFIG", "SET", "requirepass", "right-password")
    began = time.monotonic()
    result = cli("run", TARGET, url=f"redis://:{SECRET}@127.0.0.1:{server.port}/0")
    took = time.monotonic() - began
    assert_readable(result, EXIT_REDIS, f"redis://:***@127.0.0.1:{server.port}",
                    "AuthenticationError", "password")
    assert took < REFUSAL_BOUND  # not the 30 s a server that is not up yet gets


def test_a_user_missing_a_permission_the_worker_needs_exits_3_at_once(
    server: ServerProcess,
) -> None:
    lock_down(server, "ACL", "SETUSER", "default", "-evalsha", "-eval")
    began = time.monotonic()
    result = cli("run", TARGET, url=server.url)
    took = time.monotonic() - began
    assert_readable(result, EXIT_REDIS, "NoPermissionError", "evalsha", "ACL")
    assert took < REFUSAL_BOUND


def test_redis_that_never_comes_up_exits_3_after_the_bound_said_once() -> None:
    port = free_port()
    result = cli("run", TARGET, "--wait-for-redis", "1.5",
                 url=f"redis://:{SECRET}@127.0.0.1:{port}/0")
    assert_readable(result, EXIT_REDIS, f"cannot reach Redis at redis://:***@127.0.0.1:{port}",
                    "waited 1.5s", "--wait-for-redis")
    assert result.stderr.count("not reachable yet") == 1, result.stderr


def test_the_admin_commands_share_the_one_line_errors(app_dir: Path) -> None:
    assert_readable(cli("stats", "raises_on_import:jobs", cwd=app_dir), EXIT_USAGE,
                    "cannot import 'raises_on_import'", "KeyError")


@pytest.fixture
def late_server() -> Iterator[ServerProcess]:
    """A server whose port is known now, started by the test when it wants."""
    server = ServerProcess()
    yield server
    server.kill()
    server.cleanup()


async def test_a_worker_waits_for_a_redis_that_comes_up_second(
    late_server: ServerProcess,
) -> None:
    namespace = "cli-late-redis"
    with worker_pool() as workers:
        worker = WorkerProcess(late_server.url, namespace, {}, ["--wait-for-redis", "20"])
        workers.append(worker.start())
        await wait_until(lambda: "not reachable yet" in worker.log(), timeout=RUN_TIMEOUT)
        assert worker.alive(), worker.log()
        await anyio.sleep(LATE_START)  # the scenario: Redis starts a while after the worker
        late_server.start()
        jobs = jobsapp.build(late_server.url, namespace)
        r = redis.asyncio.Redis.from_url(late_server.url)
        try:
            await jobs.record.enqueue("after-redis-came-up")

            async def ran() -> bool:
                assert worker.alive(), worker.log()
                return bool(await r.lrange(jobsapp.ran_key(namespace), 0, -1))

            await wait_until(ran, timeout=RUN_TIMEOUT)
        finally:
            await jobs.app.close()
            await r.aclose()
        await worker.stop()
        log = worker.log()
        assert log.count("not reachable yet") == 1, log
        assert "waiting up to 20s" in log
        assert "Traceback" not in log


async def test_a_signal_while_waiting_for_redis_stops_cleanly() -> None:
    with worker_pool() as workers:
        worker = WorkerProcess(f"redis://127.0.0.1:{free_port()}/0", "cli-wait-stop", {},
                               ["--wait-for-redis", "60"])
        workers.append(worker.start())
        await wait_until(lambda: "not reachable yet" in worker.log(), timeout=RUN_TIMEOUT)
        worker.signal(signal.SIGTERM)
        assert await worker.wait_exit(RUN_TIMEOUT / 3) == 0, worker.log()
        assert "Traceback" not in worker.log()


@pytest.mark.parametrize(("error", "code", "says"), [
    (redis.exceptions.AuthenticationError("invalid username-password pair"), EXIT_REDIS,
     "check the user name and password"),
    (redis.exceptions.NoPermissionError("no permissions to run 'evalsha'"), EXIT_REDIS,
     "lacks a permission"),
    (redis.exceptions.ConnectionError("Error 111 connecting"), EXIT_REDIS, "cannot reach"),
    (redis.exceptions.TimeoutError("Timeout reading"), EXIT_REDIS, "cannot reach"),
    (redis.exceptions.ResponseError("ERR unknown command"), EXIT_REDIS, "refused"),
    (ConfigurationError("Redis 5.0 is too old"), EXIT_USAGE, "too old"),
])
def test_the_boundary_names_each_error_once_even_inside_a_task_group(
    error: Exception, code: int, says: str,
) -> None:
    url = f"redis://user:{SECRET}@127.0.0.1:6390/0"
    for raised in (error, ExceptionGroup("task group", [ExceptionGroup("inner", [error])])):
        explained = explain(raised, url)
        assert explained is not None
        assert explained[0] == code
        assert says in explained[1]
        assert SECRET not in explained[1]
    assert explain(KeyError("a bug")) is None  # a bug keeps its traceback
