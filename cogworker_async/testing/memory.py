"""The few Store operations a run needs, in memory: locks and limiter decisions.

A fake run goes through the worker's real ``Processor`` (``drain.py``), which reaches
Redis only through ``JobLocks`` (unique and periodic locks), its ``Runner`` (limiters a
job enters) and the executor's orphan count. This object answers those calls with the
semantics of their Lua scripts (``take_lock.lua``, ``release_lock.lua``,
``extend_lock.lua``; a unique lock is ``SET NX`` as in ``enqueue_unique.lua``), and
nothing else: a call the worker starts making one day that is not here fails loudly
(``AttributeError``, or ``NotImplementedError`` for a script) instead of drifting.

A concurrent limiter counts its holders as ``limit_concurrent.lua`` does (a slot taken
until its holder gives it back: a limiter of 1 entered twice at once refuses the
second, in a drained job or in a web handler under test). Window and bucket limiters
always admit (a drain runs in moments what a worker spreads over time: their rate would
refuse what Redis would not). A test may make any limiter refuse (``refusing``): then
the caller sees ``OverLimit`` as it would from Redis, and a worker reschedules the job.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

from cogworker_async.jobs.status import JobStatus
from cogworker_async.redis.keys import Keys

LIMITER_SCRIPTS: Final = frozenset({"limit_concurrent", "limit_window", "limit_bucket"})
"""The limiter scripts (``redis/limits.py``): their replies are
``[admitted, level, extra, now]``."""
LIMITER_PARTS: Final = ("holders", "window", "bucket")
"""The key each kind of limiter decides on (``Keys.limiter(name, part)``)."""


class MemoryStore:
    """Locks with a TTL, owned by a jid; limiter decisions. Not thread-safe: it is used
    by one drain (or one inline run) at a time."""

    def __init__(self, namespace: str) -> None:
        self.keys = Keys(namespace)
        self._locks: dict[str, tuple[str, float]] = {}
        """key -> (owner, monotonic expiry)."""
        self.refusing: set[str] = set()
        """Names of limiters that refuse every acquisition (``Testing.refuse``)."""
        self.holders: dict[str, set[str]] = {}
        """A concurrent limiter's holders key -> the members holding a slot."""
        self.client = _Client(self)
        self.scripts = _Scripts(self)

    def clear(self) -> None:
        self._locks.clear()
        self.refusing.clear()
        self.holders.clear()

    def holder(self, key: str) -> str | None:
        """The owner of ``key``'s lock, if it is held and not expired."""
        held = self._locks.get(key)
        if held is None:
            return None
        if held[1] <= time.monotonic():
            del self._locks[key]
            return None
        return held[0]

    def take_new_lock(self, key: str, owner: str, ttl: float) -> bool:
        """A unique job's lock, taken with its push: refused while anyone holds it."""
        if self.holder(key) is not None:
            return False
        self._locks[key] = (owner, time.monotonic() + ttl)
        return True

    def drop_lock(self, key: str, owner: str) -> None:
        """A cancelled unique job's lock, released if ``owner`` holds it (``cancel.lua``)."""
        if self.holder(key) == owner:
            del self._locks[key]

    # -- what the worker calls (``Store``'s signatures) ----------------------------------

    async def take_lock(self, key: str, owner: str, ttl: float) -> bool:
        holder = self.holder(key)
        if holder is not None and holder != owner:
            return False
        self._locks[key] = (owner, time.monotonic() + ttl)
        return True

    async def release_lock(self, key: str, owner: str) -> bool:
        if self.holder(key) != owner:
            return False
        del self._locks[key]
        return True

    async def extend_lock(self, key: str, owner: str, ttl: float) -> bool:
        if self.holder(key) != owner:
            return False
        expiry = max(self._locks[key][1], time.monotonic() + ttl)  # never shortened
        self._locks[key] = (owner, expiry)
        return True

    async def set_progress(self, identity: str,
                           updates: Sequence[tuple[str, str, float, bytes | None]]) -> None:
        """No records in a test's drain: progress goes nowhere."""

    async def take_cancels(self, identity: str, queues: Sequence[str]) -> list[tuple[str, str]]:
        return []  # a drain's cancels are taken from its world, not polled

    async def running_statuses(self, pairs: Sequence[tuple[str, str]],
                               fields: Sequence[str]) -> list[JobStatus]:
        return []

    async def orphan_count(self, queue: str, jid: str) -> int:
        """No process dies in a test's drain: no job was ever recovered."""
        return 0


class _Scripts:
    """The script runner's twin (``redis/scripts.py``): a limiter's decision is the only
    script a run calls directly — admitted, unless the test made it refuse."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def run(self, script: str, keys: Sequence[str], args: Sequence[Any], *,
                  durable: bool = False) -> list[Any]:
        if script not in LIMITER_SCRIPTS:
            raise NotImplementedError(f"script {script!r} has no in-memory twin in "
                                      "cogworker_async.testing")
        store = self.store
        refused = any(keys[0] == store.keys.limiter(name, part) for name in store.refusing
                      for part in LIMITER_PARTS)
        if script == "limit_concurrent":  # ARGV[2] and ARGV[6...]: the members asked for
            return self._take_slots(keys[0], int(args[0]), [args[1], *args[5:]], refused)
        wanted = int(args[3]) if len(args) > 3 else 1  # a window's or a bucket's count
        return [0, int(args[0]), 0, time.time()] if refused else [wanted, 1, 0, time.time()]


    def _take_slots(self, key: str, capacity: int, members: Sequence[Any],
                    refused: bool) -> list[Any]:
        """``limit_concurrent.lua``: each member in order gets a slot while fewer than
        ``capacity`` hold one (a member held already keeps its own). No holder is ever
        gone here (one process, no lease runs out in a test): none is freed."""
        held = self.store.holders.setdefault(key, set())
        flags = ""
        for member in members:
            admitted = not refused and (member in held or len(held) < capacity)
            if admitted:
                held.add(member)
            flags += "1" if admitted else "0"
        return [int(flags[0]), len(held), 0, time.time(), flags]


class _Client:
    """What a limiter does with the Redis client directly: give a slot back, count a
    refusal for the dashboard (not kept in a test)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def zrem(self, key: str, *members: Any) -> int:
        held = self.store.holders.get(key, set())
        removed = sum(member in held for member in members)
        held.difference_update(members)
        return removed

    def pipeline(self, transaction: bool = False) -> _Pipeline:
        return _Pipeline()


class _Pipeline:
    async def __aenter__(self) -> _Pipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def incr(self, key: str) -> None:
        return None

    def expire(self, key: str, seconds: float) -> None:
        return None

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        return []
