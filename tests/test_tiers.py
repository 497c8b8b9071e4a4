"""The tiers select what they say: ``make test-fast`` must never start a worker process
or a topology, and must still run the pure and the Lua tests (tests/conftest.py marks
them; a mark that drifted would make the edit loop slow, or leave tests out of it).

One collection serves every test here (a collection of the whole suite is ~10 s of CPU):
a subprocess collects ``tests`` with ``make test-fast``'s ``-m`` expression, and records
both what pytest selected and every test's marks (the deselected ones too)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parent.parent
FAST: Final = ("not chaos and not processes and not cluster and not sentinel and not root "
               "and not browser")
COLLECT_TIMEOUT: Final = 120.0
pytestmark = pytest.mark.timeout(COLLECT_TIMEOUT + 30)
"""The collection is the first test's setup: over the default 60 s on a loaded machine
it timed out (make test, 4 other suites beside it); its own timeout says so first."""
RECORDER: Final = """
import json, sys
import pytest

class Recorder:
    def __init__(self):
        self.deselected = []

    def pytest_deselected(self, items):
        self.deselected.extend(items)

    def pytest_collection_finish(self, session):
        marks = lambda item: sorted({mark.name for mark in item.iter_markers()})
        with open(sys.argv[1], "w") as out:
            json.dump({"selected": {item.nodeid: marks(item) for item in session.items},
                       "deselected": {item.nodeid: marks(item)
                                      for item in self.deselected}}, out)

sys.exit(pytest.main(sys.argv[2:], plugins=[Recorder()]))
"""
"""Collects with the arguments it is given and writes, to the file named first, the node
ids pytest selected and those ``-m`` deselected, each with its marks."""


@dataclass(frozen=True, slots=True)
class Collection:
    fast: set[str]
    """The node ids ``pytest -m FAST`` runs."""
    marks: dict[str, set[str]]
    """Every test's marks."""

    def marked(self, name: str) -> set[str]:
        return {node for node, marks in self.marks.items() if name in marks}


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Collection:
    record = tmp_path_factory.mktemp("tiers") / "collected.json"
    done = subprocess.run(
        [sys.executable, "-c", RECORDER, str(record), "-q", "-p", "no:cacheprovider",
         "--collect-only", "-m", FAST, "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=COLLECT_TIMEOUT, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = json.loads(record.read_text())
    marks = {node: set(names) for part in ("selected", "deselected")
             for node, names in found[part].items()}
    return Collection(set(found["selected"]), marks)


def files(nodes: set[str]) -> set[str]:
    return {node.split("::")[0] for node in nodes}


def test_the_fast_tier_holds_no_process_or_topology_test_and_keeps_the_rest(
        collection: Collection) -> None:
    fast = collection.fast
    fast_files = files(fast)
    for slow_directory in ("tests/worker/e2e/", "tests/worker/chaos/", "tests/cli/supervisor/",
                           "tests/redis/cluster/", "tests/redis/sentinel/",
                           "tests/worker/chaos/netns/", "tests/web/browser/",
                           "tests/redis/deploy/"):
        assert not any(name.startswith(slow_directory) for name in fast_files), slow_directory
    assert not any("[cluster" in node or "-cluster" in node for node in fast)
    assert "tests/jobs/test_job.py" in fast_files  # pure
    assert "tests/redis/lua/test_enqueue.py" in fast_files  # a script's own tests, on one server
    assert "tests/worker/units/test_acks.py" in fast_files  # the worker's parts, no process


def test_pure_tests_need_no_server(collection: Collection) -> None:
    pure = files(collection.marked("pure"))
    assert "tests/jobs/test_job.py" in pure
    assert not any(name.startswith("tests/redis/lua/") for name in pure)
    assert "tests/redis/test_durability.py" not in pure
    assert "tests/worker/units/test_acks.py" not in pure  # it uses the session server
