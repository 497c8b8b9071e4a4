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
import numbers
from datetime import datetime, timedelta
from decimal import Decimal

Delay = float | int | timedelta
"""How long from now: seconds, or a timedelta."""
When = datetime | float | int
"""A moment: an aware datetime, or epoch seconds."""


def seconds_of(value: object, name: str = "a duration") -> float:
    """A duration as seconds: any real number (``Decimal``, ``Fraction``, numpy's too:
    ``float()`` of it), or a ``timedelta``; a TypeError naming ``name`` for anything
    else, a bool too (``True`` is not one second). Its range (above 0, a cap) is the
    caller's to check: which durations may be 0 differs."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if _real(value):
        return float(value)  # type: ignore[arg-type]
    raise TypeError(f"{name} must be seconds or a timedelta, not {type(value).__name__}")


def plain(value: object, name: str = "a duration") -> object:
    """``value`` as float seconds if it is a duration of another type (a timedelta, a
    Decimal, a Fraction, numpy's numbers), else as it is: the option values that keep an
    int or float as given, and check its type and range themselves, convert with it."""
    if isinstance(value, timedelta) or (_real(value) and not isinstance(value, int | float)):
        return seconds_of(value, name)
    return value


def _real(value: object) -> bool:
    """A real number that is not a bool. ``Decimal`` is not registered as a
    ``numbers.Real`` (it refuses to mix with floats), yet ``float()`` reads it exactly
    enough for seconds."""
    return isinstance(value, numbers.Real | Decimal) and not isinstance(value, bool)


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
