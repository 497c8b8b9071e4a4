"""``cogworker-async web`` refuses to start when the basic auth it was given is
malformed: a typo in ``$COGWORKER_WEB_AUTH`` must not serve every job, and the actions on
them, to anyone who can reach the port. Run as a real process: what a person types."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from cogworker_async.web import AUTH_ENV
from tests.cli import adminapp
from tests.servers import free_port

ROOT: Final = Path(__file__).resolve().parents[2]
COMMAND: Final = Path(sys.executable).parent / "cogworker-async"
REFUSAL_TIMEOUT: Final = 30.0
"""Seconds the command may take to refuse (imports on a busy 2-core machine); one that
starts serving instead runs until this kills it, and the test fails."""
SECRET: Final = "hunter2secret"


@pytest.mark.parametrize(("value", "problem"), [
    (SECRET, "no ':'"), ("admin:", "empty password"), (f":{SECRET}", "empty user"),
    ("", "set but empty")])
def test_a_malformed_auth_variable_refuses_to_serve(value: str, problem: str, redis_url: str,
                                                    namespace: str) -> None:
    env = {**os.environ, AUTH_ENV: value, "COGWORKER_REDIS_URL": redis_url,
           adminapp.NAMESPACE_ENV: namespace}
    done = subprocess.run(
        [str(COMMAND), "web", adminapp.TARGET, "--port", str(free_port())],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=REFUSAL_TIMEOUT,
        check=False)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert AUTH_ENV in line
    assert problem in line
    assert SECRET not in line
    assert done.stdout == ""
