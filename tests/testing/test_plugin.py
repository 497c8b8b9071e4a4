"""The pytest plugin, as a user's project loads it: a test suite of its own, run by pytest
in a fresh process with the plugin given by name (as its ``pytest11`` entry point names
it), using the fixtures the README shows — and the App is not faked after the test."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Final

PLUGIN: Final = "cogworker_async_pytest"
"""The module the ``pytest11`` entry point names."""
RUN_TIMEOUT: Final = 60.0
"""Seconds the inner pytest run gets (a fresh interpreter on a busy machine)."""

USER_SUITE: Final = '''
import pytest
import redis.exceptions

from cogworker_async import App

jobs = App("unix:///nonexistent/cogworker-plugin.sock", namespace="plugin")
sent = []


@jobs.job(name="send_welcome")
async def send_welcome(to: str) -> None:
    sent.append(to)


async def signup(email: str) -> None:  # the user's code under test
    await send_welcome.enqueue(email)


@pytest.fixture
def fake_jobs(cogworker_fake):
    return cogworker_fake(jobs)


async def test_signup_enqueues_a_welcome_email(fake_jobs):
    await signup("a@example.com")
    (queued,) = fake_jobs.enqueued(job=send_welcome)
    assert queued.args == ["a@example.com"]
    runs = await fake_jobs.drain()
    assert [run.outcome for run in runs] == ["succeeded"]
    assert sent == ["a@example.com"]


async def test_inline_runs_it_at_once(cogworker_inline):
    cogworker_inline(jobs)
    await signup("b@example.com")
    assert sent[-1] == "b@example.com"


async def test_no_longer_faked_after_the_tests():
    assert not jobs.testing.active
    with pytest.raises(redis.exceptions.ConnectionError):
        await signup("c@example.com")
'''


def test_a_user_suite_uses_the_fixtures(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_SUITE))
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    # Autoload off: the plugins are named, so the run is the same whether or not this
    # checkout's entry point is installed.
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "pytest_asyncio.plugin",
         "-p", PLUGIN, "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT,
        check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout
