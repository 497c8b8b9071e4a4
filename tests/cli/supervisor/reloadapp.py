"""The chaos tests' App, which fails to import while ``BROKEN`` exists: a developer's
typo under ``run --reload`` (tests/cli/supervisor/test_supervisor_faults.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from tests.worker.chaos.processes.chaosapp import jobs as jobs

BROKEN: Final = Path(__file__).with_name("_broken.flag")

if BROKEN.exists():
    raise SyntaxError("a typo saved in the editor")
