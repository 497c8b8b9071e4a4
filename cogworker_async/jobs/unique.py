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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

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
           key: UniqueKey | None = None) -> str:
    """The lock's digest: name + queue + (the user's key, or the canonical arguments)."""
    if key is not None:
        material = str(key(*args, **kwargs))
    else:
        material = json.dumps([list(args), dict(kwargs)], sort_keys=True,
                              separators=(",", ":"))
    return hashlib.sha256(f"{name}\0{queue}\0{material}".encode()).hexdigest()
