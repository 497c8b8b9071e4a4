"""What an import costs: the library, its admin model and the dashboard load neither of
the CLI's libraries (rich, typer); only the admin commands do. Checked in a fresh
interpreter, since this one has imported everything the other tests use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parent.parent
IMPORT_TIMEOUT: Final = 30.0
"""Seconds a fresh interpreter gets to import the package and answer."""
CLI_LIBRARIES: Final = ("rich", "typer")


def loaded_after(modules: str) -> set[str]:
    """Which of the CLI's libraries a fresh interpreter holds after ``import modules``."""
    code = (f"import sys, {modules}; "
            f"print(' '.join(m for m in {CLI_LIBRARIES!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=IMPORT_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


@pytest.mark.parametrize("modules", [
    "cogworker_async, cogworker_async.web",
    "cogworker_async.admin",
])
def test_the_library_imports_neither_rich_nor_typer(modules: str) -> None:
    assert loaded_after(modules) == set()


def test_the_admin_commands_do() -> None:
    """The check above can fail: the CLI's modules load both."""
    assert loaded_after("cogworker_async.cli.admin") == set(CLI_LIBRARIES)


WORKER_NEVER_USES: Final = ("cogworker_async.admin", "rich", "croniter", "pydantic",
                            "cogworker_async.cli.admin", "cogworker_async.web")
"""What a worker's start (``cogworker-async run``) has no use for: the admin model and
tables, a calendar (until a periodic job is defined), an options parser's validation
library. Each is a share of the start-up time a worker pays before its first job."""


def test_a_worker_start_loads_only_what_a_worker_uses() -> None:
    code = ("import sys; import cogworker_async.cli as cli; cli._commands_for(['run']); "
            "from cogworker_async import App; App('redis://127.0.0.1:1/0'); "
            f"print(' '.join(m for m in {WORKER_NEVER_USES!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=IMPORT_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
