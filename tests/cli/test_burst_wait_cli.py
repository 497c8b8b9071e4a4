"""``run --burst-wait SECONDS`` refuses what is not a finite number of seconds up to a
day, as a usage error naming the option: NaN failed every backlog count (a Redis error
escaped as a traceback), infinity waited for every scheduled job however far."""

from __future__ import annotations

import pytest

from cogworker_async.cli import EXIT_USAGE
from tests.cli import adminapp
from tests.cli.conftest import invoke


@pytest.mark.parametrize("seconds", ["nan", "inf", "-inf", "-1", "86401"])
def test_burst_wait_refuses_what_is_not_seconds_up_to_a_day(
    jobs: adminapp.Jobs, seconds: str,
) -> None:
    result = invoke("run", f"--burst-wait={seconds}")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "Invalid value for '--burst-wait'" in result.stderr
    assert "finite number of seconds from 0 to 86400" in result.stderr
    assert "Traceback" not in result.output
