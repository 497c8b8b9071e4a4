"""Liveness: the Store's operations on processes and their in-progress lists — orphan
recovery, the shutdown requeue and hand-over, relisting after Redis lost keys, the
registries, and burials of jobs orphaned too often. Mixed into ``Store`` (one object for
callers), kept apart so that each file reads in one sitting.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import redis
import redis.asyncio

from cogworker_async.redis.keys import Keys

if TYPE_CHECKING:
    from cogworker_async.redis.store import SetName

REQUEUE_BATCH: Final = 1000
"""Entries one requeue script looks at per call: one call must not block Redis for long."""

MAX_DECLARED: Final = 10_000
"""Most identities kept in declared_dead (the marks that tell a paused process, when it
wakes, that its jobs were recovered): identities are never reused, so it is bounded."""

ORPHAN_TTL: Final = 7 * 24 * 3600
"""Seconds an orphan counter lives after its last bump."""

@dataclass(slots=True)
class Requeued:
    """What one requeue did: jobs back on queues, and jobs parked as repeat orphans."""

    moved: int = 0
    parked: int = 0


HISTORY_TTL: Final = 366 * 24 * 3600
"""Seconds a day's processed/failed counts are kept (a year of history)."""


def as_bytes(value: bytes | str) -> bytes:
    """A reply's member or key as bytes (decoded replies come back as ``str``)."""
    return value.encode() if isinstance(value, str) else bytes(value)


class Liveness:
    """Mixed into ``Store``: what it provides is declared here for the type checker."""

    client: redis.asyncio.Redis
    keys: Keys

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        raise NotImplementedError

    def _trim(self, target: SetName) -> list[str]:
        raise NotImplementedError

    def zset_key(self, target: SetName) -> str:
        raise NotImplementedError

    async def requeue(
        self,
        identity: str,
        default_queue: str,
        *,
        drop: Sequence[bytes] = (),
        keep: Sequence[bytes] = (),
    ) -> int:
        """Requeue everything on this process's own in-progress list (shutdown), in
        bounded calls. ``drop``: jobs that ran (dropping is their ack); ``keep``: jobs
        left on the list untouched. Returns how many reached a queue."""
        result = await self.recover(identity, default_queue, dead_for=None, max_orphanings=0,
                                    drop=drop, keep=keep)
        assert result is not None  # unconditional: never "alive after all"
        return result.moved

    async def recover(
        self,
        identity: str,
        default_queue: str,
        *,
        dead_for: float | None,
        max_orphanings: int,
        drop: Sequence[bytes] = (),
        keep: Sequence[bytes] = (),
    ) -> Requeued | None:
        """Requeue a dead process's list: only if it has not beaten for ``dead_for``
        seconds (by Redis TIME), else None (alive after all). Jobs recovered more than
        ``max_orphanings`` times are parked in repeat_orphans instead. ``dead_for=None``
        requeues unconditionally (see ``requeue``)."""
        key = self.keys.in_progress(identity)
        try:
            budget = int(await self.client.llen(key))
        except redis.exceptions.ResponseError:
            # A list of the wrong type: the script still says whether its owner is
            # alive (then nothing is wrong here), and fails only for a dead owner.
            budget = REQUEUE_BATCH
        result = Requeued()
        while True:
            opts = {
                "queue_prefix": self.keys.queue_prefix,
                "default_queue": default_queue,
                "identity": identity,
                "threshold": -1 if dead_for is None else dead_for,
                "now": time.time(),
                "orphan_prefix": self.keys.orphanings_prefix,
                "orphan_ttl": ORPHAN_TTL,
                "max_orphanings": max_orphanings,
                "limit": max(1, min(REQUEUE_BATCH, budget)),
                "wake_channel": self.keys.wake_channel,
                "max_declared": MAX_DECLARED,
            }
            keys = [key, self.keys.process(identity), self.keys.last_beat,
                    self.keys.repeat_orphans, self.keys.queues, self.keys.declared_dead]
            args = [json.dumps(opts), len(drop), *drop, *keep]
            moved, looked, parked = (int(x) for x in await self._run("requeue", keys, args))
            if moved < 0:
                return None
            result.moved += moved
            result.parked += parked
            budget -= looked
            if looked < REQUEUE_BATCH or budget <= 0:
                return result

    async def relist(self, identity: str, raws: Sequence[bytes]) -> int | None:
        """Put ``raws`` back on ``identity``'s in-progress list where missing; None
        (nothing listed) while ``identity`` is marked declared dead."""
        keys = [self.keys.in_progress(identity), self.keys.declared_dead]
        listed = int(await self._run("relist", keys, [identity, *raws]))
        return None if listed < 0 else listed

    async def clear_declared_dead(self, identity: str) -> None:
        """Remove ``identity``'s declared_dead mark (it has fenced itself). Best effort
        on a set of the wrong type, as in beat.lua (which then never reports a zombie)."""
        try:
            await self.client.srem(self.keys.declared_dead, identity)
        except redis.exceptions.ResponseError:
            pass

    async def in_progress(self, identity: str) -> list[bytes]:
        """Everything on ``identity``'s in-progress list, newest first."""
        return [as_bytes(raw) for raw in await self.client.lrange(self.keys.in_progress(identity),
                                                                 0, -1)]

    # -- liveness, recovery and hand-over --------------------------------------------

    async def take_lock(self, key: str, owner: str, ttl: float) -> bool:
        return int(await self._run("take_lock", [key], [owner, int(ttl * 1000)])) == 1

    async def registered_identities(self) -> set[str]:
        members = await self.client.smembers(self.keys.in_progress_identities)
        return {as_bytes(m).decode("utf-8", "replace") for m in members}

    async def scanned_identities(self) -> set[str]:
        prefix = self.keys.in_progress_prefix
        found = set()
        async for key in self.client.scan_iter(match=prefix + "*", count=1000):
            found.add(as_bytes(key).decode("utf-8", "replace")[len(prefix):])
        return found

    async def beat_info(self, identity: str) -> dict[str, Any] | None:
        """What ``identity`` last said about itself (host, pid, memory, loop lag)."""
        raw = await self.client.hget(self.keys.beats, identity)
        try:
            info = json.loads(raw) if raw else None
        except ValueError:
            return None
        return info if isinstance(info, dict) else None

    async def record_recovery(self, event: dict[str, Any], keep: int) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.lpush(self.keys.recoveries, json.dumps(event))
            pipe.ltrim(self.keys.recoveries, 0, keep - 1)
            await pipe.execute()

    async def forget(self, identity: str, *, declared_dead: bool) -> bool:
        keys = self.keys
        reply = await self._run(
            "forget",
            [keys.in_progress(identity), keys.in_progress_identities, keys.last_beat,
             keys.beats, keys.workers(identity), keys.process(identity), keys.declared_dead],
            [identity, "1" if declared_dead else "0"],
        )
        return int(reply) == 1

    async def list_head(self, key: str, count: int) -> list[bytes]:
        return [as_bytes(raw) for raw in await self.client.lrange(key, 0, count - 1)]

    async def bury_orphan(self, raw: bytes, entry: bytes, jid: str | None) -> bool:
        keys = self.keys
        day = time.strftime("%Y-%m-%d", time.gmtime())
        reply = await self._run(
            "bury_orphan",
            [keys.repeat_orphans, keys.dead, keys.stats_failed, keys.orphanings(jid or "-"),
             keys.stats_failed_on(day)],
            [raw, entry, repr(time.time()), HISTORY_TTL, *self._trim("dead")],
        )
        return int(reply) == 1

    async def park_unsettled(self, identity: str, raw: bytes, record: bytes) -> bool:
        keys = [self.keys.in_progress(identity), self.keys.unsettled]
        return int(await self._run("park_unsettled", keys, [raw, record])) == 1

    async def file_unsettled(
        self, record: bytes, target: SetName, entry: bytes, delay: float
    ) -> bool:
        keys = [self.keys.unsettled, self.zset_key(target)]
        args = [record, entry, repr(float(delay)), repr(time.time()), *self._trim(target)]
        return int(await self._run("file_unsettled", keys, args)) == 1

    async def orphan_counts(self, jids: Sequence[str | None]) -> list[int]:
        """``orphan_count`` of each jid (0 for None or an unreadable counter)."""
        if not jids:
            return []
        values = await self.client.mget([self.keys.orphanings(j or "-") for j in jids])
        counts = []
        for value in values:
            try:
                counts.append(int(value or 0))
            except ValueError:
                counts.append(0)
        return counts

    async def is_alive(self, identity: str) -> bool:
        return int(await self.client.exists(self.keys.process(identity))) == 1

    async def orphan_count(self, jid: str) -> int:
        """How often ``jid`` was recovered from a dead process (0 if never)."""
        try:
            return int(await self.client.get(self.keys.orphanings(jid)) or 0)
        except (ValueError, redis.exceptions.ResponseError):
            return 0

