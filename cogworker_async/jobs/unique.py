"""Unique jobs: at most one job with the same digest waiting or running.

``@jobs.job(unique=True)`` (or ``"until_executed"``, the default policy, or
``"until_started"``): enqueueing a job whose digest is locked returns ``None``. The
digest covers the job's name, arguments and queue, or what ``unique_key(*args,
**kwargs)`` returns. The lock is owned by the jid that took it:

- taken atomically with the push (``enqueue_unique.lua``): a crash between the two can
  never leave a lock without its job;
- ``until_started``: released when the job starts;
- ``until_executed``: released when it succeeds and on every terminal failure (dead,
  ``ProcessDied`` burial); extended over a retry delay so the retry keeps it;
- it always has a TTL (``unique_ttl``, default one hour), so a lost release heals.

As a value, on ``@jobs.job`` and ``.options()`` alike: ``dedup=Unique(policy, ttl=...,
key=...)`` (``key``: a fixed str, or ``fn(*args, **kwargs) -> str``); the flat
``unique=``, ``unique_ttl=``, ``unique_key=`` still work. It is one of the dedup family
(``dedup.py``): one value of the family per job.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal

from cogworker_async.jobs.times import plain

UniquePolicy = Literal["until_executed", "until_started"]
POLICIES: Final = ("until_executed", "until_started")
DEFAULT_TTL: Final = 3600.0
"""Seconds a unique lock lives at most (it is released earlier in the normal course)."""
MAX_TTL: Final = 366 * 24 * 3600.0
"""Longest ``unique_ttl`` (a year): a lock is in Redis' memory until it expires."""

UniqueKey = Callable[..., str]


def policy_of(unique: bool | str | None) -> UniquePolicy | None:
    """``unique=`` option -> policy, or None; refuse anything else clearly."""
    if unique is None or unique is False:
        return None
    if unique is True:
        return "until_executed"
    if unique in POLICIES:
        return unique  # type: ignore[return-value]
    raise ValueError(f"unique must be True, False, 'until_executed' or 'until_started', "
                     f"not {unique!r}")


def digest(name: str, queue: str, args: Sequence[Any], kwargs: Mapping[str, Any],
           key: UniqueKey | str | None = None) -> str:
    """The lock's digest: name + queue + (the user's key — a str, or its function of the
    arguments —, or the canonical arguments)."""
    if isinstance(key, str):
        material = key
    elif key is not None:
        material = str(key(*args, **kwargs))
    else:
        material = json.dumps([list(args), dict(kwargs)], sort_keys=True,
                              separators=(",", ":"))
    return hashlib.sha256(f"{name}\0{queue}\0{material}".encode()).hexdigest()


def check_key(key: object) -> None:
    """A dedup family's ``key=``: a non-empty str, a function of the job's arguments, or
    None (the arguments themselves)."""
    if key is None or callable(key):
        return
    if not isinstance(key, str) or not key:
        raise TypeError(f"key must be a non-empty str or fn(*args, **kwargs) -> str, "
                        f"not {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"key must be at most {MAX_KEY_LENGTH} characters")


MAX_KEY_LENGTH: Final = 1000
"""Longest fixed ``key=`` of a dedup family, in characters."""


@dataclass(frozen=True, slots=True)
class Unique:
    """``dedup=Unique("until_executed", ttl=3600, key=None)``: at most one job of the
    digest waiting or running (module docstring). ``key``: what the digest covers
    beside the name and queue (None: the arguments)."""

    policy: UniquePolicy = "until_executed"
    ttl: float | timedelta = DEFAULT_TTL
    key: str | UniqueKey | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"Unique's policy must be one of {POLICIES}, not {self.policy!r}")
        object.__setattr__(self, "ttl", plain(self.ttl, "ttl"))
        if isinstance(self.ttl, bool) or not isinstance(self.ttl, int | float):
            raise TypeError(f"ttl must be seconds or a timedelta, not {type(self.ttl).__name__}")
        if not (math.isfinite(self.ttl) and 0 < self.ttl <= MAX_TTL):
            raise ValueError(f"ttl must be seconds > 0 and <= {MAX_TTL:,.0f}, got {self.ttl!r}")
        check_key(self.key)

    def fields(self) -> dict[str, Any]:
        """The ``JobOptions`` fields it sets: the ttl as given, as the flat
        ``unique_ttl=`` keeps it (the payload's ``unique_ttl`` is the same JSON)."""
        return {"unique": self.policy, "unique_ttl": self.ttl, "unique_key": self.key}
