"""Fair groups inside a queue: what a group name may be, and the group a job names.

Jobs of one queue enqueued with a group (``options(group="tenant-42")``, or
``@jobs.job(group=fn)`` where ``fn(*args, **kwargs)`` names it) wait on their group's
list (``redis/lua/_queue.lua``); the fetch serves the groups that have jobs waiting in
turn, round-robin, the queue's jobs without a group taking one turn together. So one
group's backlog never delays another group's next job by more than one round, however
long it is. ``App(group_limits={"reports": 2})``: at most 2 jobs of any one group of
that queue run at once across the fleet, counted from the in-progress lists as
``queue_limits`` is (a crash frees its share when recovery takes the dead process's
list back). Within a group, jobs go first in, first out; a limit of 1 runs them one at a
time, in order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

MAX_GROUP_LENGTH: Final = 200
"""Longest group name, in characters."""

GroupKey = Callable[..., Any]
"""``fn(*args, **kwargs) -> str | None``: the group of one enqueue (None: none)."""


def check_group(value: object, what: str = "group") -> str:
    """``value`` as a group name, or a TypeError/ValueError naming the problem. A name is
    1 to 200 printable characters, without a quote or a backslash (the scripts find it
    in the payload without decoding it)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str (a group's name), not {type(value).__name__}")
    if not 0 < len(value) <= MAX_GROUP_LENGTH:
        raise ValueError(f"{what} must be 1 to {MAX_GROUP_LENGTH} characters, got "
                         f"{len(value)}")
    if not value.isprintable() or '"' in value or "\\" in value:
        raise ValueError(f"{what} must be printable, without a quote or a backslash: "
                         f"{value!r}")
    return value


def split_group(group: object) -> tuple[str | None, GroupKey | None]:
    """``@jobs.job(group=...)`` as (a fixed name, a function naming it), one of them None."""
    if group is None or isinstance(group, str):
        return (None if group is None else check_group(group)), None
    if callable(group):
        return None, group
    raise TypeError(f"group must be a str or a function of the job's arguments, not "
                    f"{type(group).__name__}")


def group_for(key: GroupKey, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any],
              name: str) -> str | None:
    """The group ``key`` names for one enqueue of job ``name`` (checked), or None."""
    found = key(*args, **kwargs)
    return None if found is None else check_group(found, f"{name}: group(...) returned")


def group_of(raw: bytes) -> str | None:
    """The group a raw job names, as the scripts read it (None: none)."""
    if b'"group":' not in raw:
        return None
    try:
        found = json.loads(raw).get("group")
    except Exception:
        return None
    return found if isinstance(found, str) and found else None
