"""``enqueue`` is typed with the job's own signature: mypy catches a wrong call."""

import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).parent / "typing" / "sample.py"


def test_mypy_checks_a_jobs_arguments_at_the_enqueue_call() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(SAMPLE)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert any("sample.py:13" in e and '"int"' in e for e in errors), result.stdout
    assert any("sample.py:14" in e and "subjet" in e for e in errors), result.stdout
    assert any("sample.py:15" in e and "Missing positional argument" in e for e in errors), (
        result.stdout)
    assert len(errors) == 3, result.stdout


PAYLOAD_SAMPLE = Path(__file__).parent / "typing" / "payload_sample.py"


def test_mypy_checks_payload_field_names_and_middleware_may_add_its_own() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(PAYLOAD_SAMPLE)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert any("payload_sample.py:9" in e and '"qeue"' in e for e in errors), result.stdout
    assert any("payload_sample.py:11" in e and "'enqued_at'" in e for e in errors), (
        result.stdout)
    assert len(errors) == 2, result.stdout


OPTIONS_SAMPLE = Path(__file__).parent / "typing" / "options_sample.py"


def test_mypy_checks_the_option_values_on_both_surfaces() -> None:
    """The values and the flat spellings type-check on ``@jobs.job`` and ``.options``
    alike (one ``JobKeywords``); a wrong value, a misspelt keyword and a decorator's
    ``jid=`` are errors, and the enqueue after ``.options(...)`` stays typed."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(OPTIONS_SAMPLE)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    expected = {22: '"dedup"', 23: '"retry"', 24: '"on_failure"', 25: '"grup"', 26: '"int"',
                29: '"jid"'}
    for line, what in expected.items():
        assert any(f"options_sample.py:{line}:" in e and what in e for e in errors), (
            result.stdout)
    assert all(int(e.split(":")[1]) in expected for e in errors), result.stdout
