"""The tiers select what they say: ``make test-fast`` must never start a worker process
or a topology, and must still run the pure and the Lua tests (tests/conftest.py marks
them; a mark that drifted would make the edit loop slow, or leave tests out of it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
FAST: Final = ("not chaos and not processes and not cluster and not sentinel and not root "
               "and not browser")
COLLECT_TIMEOUT: Final = 120.0


def collected(expression: str) -> set[str]:
    """The node ids ``pytest -m expression`` would run (collected in a subprocess)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         "-m", expression, "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=COLLECT_TIMEOUT, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_the_fast_tier_holds_no_process_or_topology_test_and_keeps_the_rest() -> None:
    fast = collected(FAST)
    files = {node.split("::")[0] for node in fast}
    for slow_directory in ("tests/worker/e2e/", "tests/worker/chaos/", "tests/cli/supervisor/",
                           "tests/redis/cluster/", "tests/redis/sentinel/",
                           "tests/worker/chaos/netns/", "tests/web/browser/",
                           "tests/redis/deploy/"):
        assert not any(name.startswith(slow_directory) for name in files), slow_directory
    assert not any("[cluster" in node or "-cluster" in node for node in fast)
    assert "tests/jobs/test_job.py" in files  # pure
    assert "tests/redis/lua/test_enqueue.py" in files  # a script's own tests, on one server
    assert "tests/worker/units/test_acks.py" in files  # the worker's parts, no process


def test_pure_tests_need_no_server() -> None:
    pure = {node.split("::")[0] for node in collected("pure")}
    assert "tests/jobs/test_job.py" in pure
    assert not any(name.startswith("tests/redis/lua/") for name in pure)
    assert "tests/redis/test_durability.py" not in pure
    assert "tests/worker/units/test_acks.py" not in pure  # it uses the session server
