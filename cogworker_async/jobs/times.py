"""Times an enqueue is given: a delay (seconds or a timedelta) and a moment (an aware
datetime or epoch seconds), refused at the call when they are not one."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from cogworker_async.jobs.definition import Delay, When


def seconds_from(delay: Delay) -> float:
    """A delay as seconds; refuse what is not one."""
    if isinstance(delay, timedelta):
        value = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        value = float(delay)
    else:
        raise TypeError(f"a delay must be seconds or a timedelta, not {type(delay).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"a delay must be a finite number of seconds >= 0, got {value!r}")
    return value


def epoch_from(when: When, what: str = "enqueue_at") -> float:
    """A point in time as epoch seconds; refuse naive datetimes (``what``: the argument,
    for the error)."""
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(f"{what} needs an aware datetime (with tzinfo), or epoch seconds")
        return when.timestamp()
    if isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
        return float(when)
    raise TypeError(f"{what} takes an aware datetime or epoch seconds, not {when!r}")
