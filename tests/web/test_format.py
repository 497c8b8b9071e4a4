"""How times, durations and sizes read."""

from __future__ import annotations

import pytest

from cogworker_async.web import format


@pytest.mark.parametrize(("seconds", "text"), [
    (0.25, "250 ms"), (3, "3 s"), (59.4, "59 s"), (59.6, "1 min"), (170, "3 min"),
    (3599.9, "1 h"), (3600 + 600, "1 h 10 min"), (86400 * 3, "3 d"), (None, "–"),
])
def test_duration(seconds: float | None, text: str) -> None:
    assert format.duration(seconds) == text


def test_relative_past_future_and_now() -> None:
    assert format.relative(97.0, 100.0) == "3 s ago"
    assert format.relative(220.0, 100.0) == "in 2 min"
    assert format.relative(100.4, 100.0) == "now"
    assert format.relative(None, 100.0) == "–"


def test_utc_and_size() -> None:
    assert format.utc(0) == "1970-01-01 00:00:00 UTC"
    assert format.utc(1e300) == ""
    assert format.size(512) == "512 B"
    assert format.size(1536 * 1024) == "1.5 MiB"
