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

As a value, on ``@jobs.job`` and ``.options()`` alike: ``group=Group(key_or_fn,
limit=n)`` (a plain str or function still works). A group limit is per queue — the
fetch script counts it for every group of the queue, as ``group_limits`` does — so
``limit=`` declares the queue's entry of ``App(group_limits=...)``: a decorator may add
it (the App's settings take it, and so do its workers, which import the decorated
module), the same limit again is fine, another one is a ``ValueError`` naming both. A
call (``.options(group=Group(..., limit=n))``) cannot set a limit (the workers read the
App's, never a payload's): its ``limit`` must be the queue's already.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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


MAX_GROUP_LIMIT: Final = 1_000_000
"""Largest ``Group(limit=)``: as ``settings.MAX_QUEUE_LIMIT``."""


@dataclass(frozen=True, slots=True)
class Group:
    """``group=Group(key_or_fn, limit=None)``: the fair group a job waits in — a name, or
    ``fn(*args, **kwargs)`` naming it per enqueue (None: no group) —, and the most jobs
    of any one group of its queue running at once (module docstring)."""

    key: str | GroupKey
    limit: int | None = None

    def __post_init__(self) -> None:
        split_group(self.key)
        if self.limit is not None and (isinstance(self.limit, bool)
                                       or not isinstance(self.limit, int)):
            raise TypeError(f"Group's limit must be an int, not {type(self.limit).__name__}")
        if self.limit is not None and not 1 <= self.limit <= MAX_GROUP_LIMIT:
            raise ValueError(f"Group's limit must be from 1 to {MAX_GROUP_LIMIT:,}, "
                             f"got {self.limit}")

    def fields(self) -> dict[str, Any]:
        """The ``JobOptions`` fields it sets: a fixed name, or the function naming it."""
        name, key = split_group(self.key)
        return {"group": name, "group_key": key}


def group_value(value: object) -> Group:
    """``group=`` as a ``Group``: one already, a name, or a function."""
    return value if isinstance(value, Group) else Group(value)  # type: ignore[arg-type]


def with_limit(limits: Mapping[str, int], queue: str, limit: int | None) -> dict[str, int]:
    """``limits`` (an App's ``group_limits``) with ``queue``'s declared as ``limit``; a
    ValueError if the queue has another one already."""
    known = limits.get(queue)
    if limit is None or known == limit:
        return dict(limits)
    if known is not None:
        raise ValueError(f"Group(limit={limit}) for queue {queue!r}, whose group limit is "
                         f"{known} already (group_limits, or another job of the queue): a "
                         "group limit is per queue, one value")
    return {**limits, queue: limit}


def check_call_limit(limits: Mapping[str, int], queue: str, limit: int | None) -> None:
    """A call's ``Group(limit=)``: the queue's limit already, or a ValueError (a call
    cannot set one: the workers read the App's ``group_limits``, never a payload)."""
    if limit is not None and limits.get(queue) != limit:
        raise ValueError(f"Group(limit={limit}) on a call: queue {queue!r}'s group limit is "
                         f"{limits.get(queue)} — a limit is declared on @jobs.job(group="
                         "Group(..., limit=n)) or App(group_limits=...), read by the workers")
