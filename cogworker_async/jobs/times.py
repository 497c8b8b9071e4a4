"""Durations and times, as every surface takes them: a duration is seconds or a
``timedelta`` (``seconds_of``, the one converter: ``@jobs.job(timeout=, keep_result=,
unique_ttl=, throttle=, debounce=)``, ``.options(expires_in=)``, ``Unique(ttl=)``,
``Throttle``/``Debounce``, ``RetryPolicy(delay=)``, what a ``retry_in`` returns;
``Retry(in_=)`` in ``errors.py`` reads it the same way); a delay before a job runs is one
too, and a negative one is "now" (``seconds_from``: arq's ``_defer_by`` reads it so); a
moment is an aware datetime or epoch seconds (``epoch_from``). Anything else is refused
at the call.

No imports from the package: the option values below ``definition`` (``unique``,
``dedup``, ``retries``) convert with it too.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

Delay = float | int | timedelta
"""How long from now: seconds, or a timedelta."""
When = datetime | float | int
"""A moment: an aware datetime, or epoch seconds."""


def seconds_of(value: object, name: str = "a duration") -> float:
    """A duration as seconds: a number, or a ``timedelta``; a TypeError naming ``name``
    for anything else, a bool too (``True`` is not one second). Its range (above 0, a
    cap) is the caller's to check: which durations may be 0 differs."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"{name} must be seconds or a timedelta, not {type(value).__name__}")


def seconds_from(delay: Delay) -> float:
    """A delay before a job runs, as seconds >= 0: a negative one is "now" (a moment
    computed a little late must not fail the enqueue); NaN and infinity are refused."""
    value = seconds_of(delay, "a delay")
    if not math.isfinite(value):
        raise ValueError(f"a delay must be a finite number of seconds, got {value!r}")
    return max(0.0, value)


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
