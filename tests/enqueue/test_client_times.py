from datetime import datetime, timedelta, timezone

import pytest

from cogworker_async.enqueue.client import epoch_from, seconds_from


def test_delays() -> None:
    assert seconds_from(30) == 30.0
    assert seconds_from(timedelta(minutes=1)) == 60.0
    assert seconds_from(-1) == 0.0  # a negative delay is "now", as arq's _defer_by
    with pytest.raises(ValueError, match="finite"):
        seconds_from(float("inf"))
    with pytest.raises(TypeError):
        seconds_from(True)
    with pytest.raises(TypeError):
        seconds_from("10")  # type: ignore[arg-type]


def test_times() -> None:
    when = datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=2)))
    assert epoch_from(when) == when.timestamp()
    assert epoch_from(1_900_000_000) == 1_900_000_000.0
    with pytest.raises(ValueError, match="aware"):
        epoch_from(datetime(2030, 1, 1))
    with pytest.raises(TypeError):
        epoch_from(True)
