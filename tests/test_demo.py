"""``make run``'s demo, run as a new user runs it: on the embedded server, to the end.

Its last lines are what a newcomer reads: the dead job's error class and message, the
command that opens the dashboard, and how to stop the server it leaves running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cogworker_async.errors import EmbeddedServerError
from cogworker_async.redis.embedded import EmbeddedServer, find_binary

ROOT = Path(__file__).resolve().parent.parent


def _has_binary() -> bool:
    try:
        find_binary()
    except EmbeddedServerError:
        return False
    return True


pytestmark = [pytest.mark.skipif(not _has_binary(), reason="no server binary (embedded extra)"),
              pytest.mark.timeout(120)]


def test_the_demo_ends_with_the_dead_jobs_error_and_the_dashboard_command(
    tmp_path: Path,
) -> None:
    data = tmp_path / "d"
    env = {**os.environ, "COGWORKER_DATA_DIR": str(data)}
    env.pop("COGWORKER_REDIS_URL", None)
    try:
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")],
                              cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=90, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        last = done.stdout.strip().splitlines()[-6:]
        assert last[0].startswith("Done in ")
        assert last[1].startswith("  examples.app.import_feed ")
        assert last[1].endswith(
            ": ValueError: cannot parse feed at https://example.com/broken.xml")
        assert last[2].startswith("Open the dashboard")
        assert last[3].endswith("cogworker-async web examples.app:jobs")
        assert last[5].endswith("cogworker-async embedded stop")
        assert EmbeddedServer(data).status().running  # for the dashboard to show
    finally:
        EmbeddedServer(data).stop()
