"""``enqueue`` is typed with the job's own signature: mypy catches a wrong call.

One mypy run checks every sample (``checked``, once for the module: each run reads the
whole package again, ~5 s); each test reads the errors of its own sample."""

import subprocess
import sys
from pathlib import Path

import pytest

SAMPLES = Path(__file__).parent / "typing"
SAMPLE = SAMPLES / "sample.py"
PAYLOAD_SAMPLE = SAMPLES / "payload_sample.py"
OPTIONS_SAMPLE = SAMPLES / "options_sample.py"


class Checked:
    """mypy's report on the samples: its whole output, and each sample's error lines."""

    def __init__(self, stdout: str) -> None:
        self.stdout = stdout
        self.lines = [line for line in stdout.splitlines() if ": error:" in line]

    def errors(self, sample: Path) -> list[str]:
        return [line for line in self.lines if Path(line.split(":")[0]).name == sample.name]


@pytest.fixture(scope="module")
def checked() -> Checked:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         str(SAMPLE), str(PAYLOAD_SAMPLE), str(OPTIONS_SAMPLE)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    return Checked(result.stdout)


def test_mypy_checks_a_jobs_arguments_at_the_enqueue_call(checked: Checked) -> None:
    errors = checked.errors(SAMPLE)
    assert any("sample.py:13" in e and '"int"' in e for e in errors), checked.stdout
    assert any("sample.py:14" in e and "subjet" in e for e in errors), checked.stdout
    assert any("sample.py:15" in e and "Missing positional argument" in e for e in errors), (
        checked.stdout)
    assert len(errors) == 3, checked.stdout


def test_mypy_checks_payload_field_names_and_middleware_may_add_its_own(
        checked: Checked) -> None:
    errors = checked.errors(PAYLOAD_SAMPLE)
    assert any("payload_sample.py:9" in e and '"qeue"' in e for e in errors), checked.stdout
    assert any("payload_sample.py:11" in e and "'enqued_at'" in e for e in errors), (
        checked.stdout)
    assert len(errors) == 2, checked.stdout


def test_mypy_checks_the_option_values_on_both_surfaces(checked: Checked) -> None:
    """The values and the flat spellings type-check on ``@jobs.job`` and ``.options``
    alike (one ``JobKeywords``); a wrong value, a misspelt keyword and a decorator's
    ``jid=`` are errors, and the enqueue after ``.options(...)`` stays typed."""
    errors = checked.errors(OPTIONS_SAMPLE)
    expected = {22: '"dedup"', 23: '"retry"', 24: '"on_failure"', 25: '"grup"', 26: '"int"',
                29: '"jid"'}
    for line, what in expected.items():
        assert any(f"options_sample.py:{line}:" in e and what in e for e in errors), (
            checked.stdout)
    assert all(int(e.split(":")[1]) in expected for e in errors), checked.stdout


def test_mypy_finds_errors_in_the_samples_only(checked: Checked) -> None:
    """Each sample's errors are counted above; none may hide elsewhere (the package)."""
    samples = {SAMPLE.name, PAYLOAD_SAMPLE.name, OPTIONS_SAMPLE.name}
    assert all(Path(line.split(":")[0]).name in samples for line in checked.lines), (
        checked.stdout)
