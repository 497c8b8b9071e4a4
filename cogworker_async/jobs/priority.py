"""Priorities inside a queue: what a job's priority may be, and how long a wait is worth
one level (aging).

A job of priority ``p`` (an int from -10 to 10, higher sooner, default 0) waits on its
queue's list of that priority (``redis/lua/_queue.lua``); the fetch takes the head of the
list whose ``enqueued_at - p * aging`` is least (``redis/lua/fetch.lua``). So within one
priority jobs go first in, first out, and a job that has waited ``aging`` seconds counts
as one level higher for every ``aging`` it has waited: under a flood of priority-10
work, a job of priority ``p`` enqueued at ``t`` goes before every job enqueued after
``t + (10 - p) * aging`` — its wait is bounded by that plus the time the workers take to
run what was enqueued before then with a better score. With aging off (None) a higher
priority always goes first, and a low one may wait as long as the flood lasts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

MIN_PRIORITY: Final = -10
MAX_PRIORITY: Final = 10
DEFAULT_PRIORITY: Final = 0
PRIORITY_AGING: Final = 300.0
"""Default seconds of waiting worth one priority level (``App(priority_aging=...)``)."""
MAX_PRIORITY_AGING: Final = 366 * 24 * 3600.0
"""Longest aging: a year (None turns aging off)."""
LEVELS: Final = tuple(range(MAX_PRIORITY, MIN_PRIORITY - 1, -1))
"""Every priority, highest (first served when aging is off) first."""


def check_priority(value: object) -> int:
    """``value`` as a priority, or a TypeError/ValueError naming the problem."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"priority must be an int from {MIN_PRIORITY} to {MAX_PRIORITY}, "
                        f"not {type(value).__name__}")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValueError(f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY} (higher "
                         f"runs sooner), got {value}")
    return value


def aging_ms(aging: float | None) -> str:
    """The fetch script's aging argument: milliseconds a level is worth, "" for none."""
    return "" if aging is None else repr(aging * 1000.0)


def describe(counts: Mapping[int, int]) -> str:
    """Jobs waiting per priority, highest first (``10:2 0:5 -3:1``); "" for a queue whose
    jobs are all of priority 0 (nothing to tell apart)."""
    if set(counts) <= {DEFAULT_PRIORITY}:
        return ""
    return " ".join(f"{level}:{counts[level]:,}" for level in sorted(counts, reverse=True))
