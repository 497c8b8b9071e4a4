"""Liveness: the Store's part for processes and their in-progress lists — orphan
recovery, the shutdown requeue and hand-over, relisting after Redis lost keys, the
registries, and burials of jobs orphaned too often.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from cogworker_async.jobs import stored
from cogworker_async.jobs.status import LIVE_TTL
from cogworker_async.redis.errors import RedisError, ResponseError
from cogworker_async.redis.part import Part, SetName, Shared
from cogworker_async.redis.part import as_bytes as as_bytes  # its callers import it here
from cogworker_async.redis.stats import HISTORY_TTL as HISTORY_TTL
from cogworker_async.redis.stats import StatsPart

log = logging.getLogger(__name__)

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
    cancelled: int = 0
    """Jobs dropped instead: a cancel was waiting for them (``cancel.lua``)."""


class Liveness(Part):
    def __init__(self, shared: Shared, stats: StatsPart) -> None:
        super().__init__(shared)
        self.stats = stats

    async def requeue(
        self,
        identity: str,
        queue: str,
        *,
        drop: Sequence[bytes] = (),
        keep: Sequence[bytes] = (),
    ) -> int:
        """Requeue everything on this process's own in-progress list for ``queue``
        (shutdown), in bounded calls. ``drop``: jobs that ran (dropping is their ack);
        ``keep``: jobs left on the list untouched. Returns how many reached the queue."""
        result = await self.recover(identity, queue, dead_for=None, max_orphanings=0,
                                    drop=drop, keep=keep)
        assert result is not None  # unconditional: never "alive after all"
        return result.moved

    async def recover(
        self,
        identity: str,
        queue: str,
        *,
        dead_for: float | None,
        max_orphanings: int,
        drop: Sequence[bytes] = (),
        keep: Sequence[bytes] = (),
    ) -> Requeued | None:
        """Requeue a dead process's list for ``queue``: only if it has not beaten to that
        queue's slot for ``dead_for`` seconds (by Redis TIME), else None (alive after
        all). Jobs recovered more than ``max_orphanings`` times are parked in the queue's
        repeat_orphans instead. ``dead_for=None`` requeues unconditionally (``requeue``)."""
        keys = self.keys
        key = keys.in_progress(queue, identity)
        try:
            budget = int(await self.client.llen(key))
        except ResponseError:
            # A list of the wrong type: the script still says whether its owner is
            # alive (then nothing is wrong here), and fails only for a dead owner.
            budget = REQUEUE_BATCH
        result = Requeued()
        while True:
            opts: dict[str, Any] = {
                "identity": identity,
                "threshold": -1 if dead_for is None else dead_for,
                "now": time.time(),
                "orphan_prefix": keys.orphanings_prefix(queue),
                "orphan_ttl": ORPHAN_TTL,
                "max_orphanings": max_orphanings,
                "limit": max(1, min(REQUEUE_BATCH, budget)),
                "wake_channel": keys.wake_channel,
                "queue": queue,
                "max_declared": MAX_DECLARED,
                "finished_ttl": self.keep_status,
            }
            if self.track_jobs:  # absent, not null: cjson reads null as a true value
                opts["record_prefix"] = keys.record_prefix(queue)
            script_keys = [key, keys.queue_process(queue, identity), keys.queue_last_beat(queue),
                           keys.repeat_orphans(queue), keys.queue(queue),
                           keys.queue_declared_dead(queue)]
            args = [json.dumps(opts), len(drop), *drop, *keep]
            # Durable when it acks (drop) at a hand-over: a lost ack would run it again.
            reply = await self.scripts.run("requeue", script_keys, args, durable=bool(drop))
            moved, looked, parked, *cancelled = (int(x) for x in reply)
            if moved < 0:
                return None
            result.moved += moved
            result.parked += parked
            result.cancelled += sum(cancelled)
            budget -= looked
            if looked < REQUEUE_BATCH or budget <= 0:
                return result

    async def relist(self, identity: str, queue: str, raws: Sequence[bytes]) -> int | None:
        """Put ``raws`` back on ``identity``'s in-progress list for ``queue`` where
        missing; None (nothing listed) while ``identity`` is marked declared dead there."""
        keys = [self.keys.in_progress(queue, identity), self.keys.queue_declared_dead(queue)]
        listed = int(await self.scripts.run("relist", keys, [identity, *raws]))
        return None if listed < 0 else listed

    async def clear_declared_dead(self, identity: str, queues: Sequence[str]) -> None:
        """Remove ``identity``'s declared_dead marks in each of ``queues``' slots (it has
        fenced itself). Best effort on a set of the wrong type, as in beat.lua (which then
        never reports a zombie)."""
        for queue in queues:
            try:
                await self.client.srem(self.keys.queue_declared_dead(queue), identity)
            except ResponseError:
                pass

    async def in_progress(self, identity: str, queue: str) -> list[bytes]:
        """Everything on ``identity``'s in-progress list for ``queue``, newest first."""
        key = self.keys.in_progress(queue, identity)
        return [as_bytes(raw) for raw in await self.client.lrange(key, 0, -1)]

    # -- liveness, recovery and hand-over --------------------------------------------

    async def registered_identities(self) -> set[str]:
        """Identities in the namespace's registry (every process that has beaten)."""
        members = await self.client.smembers(self.keys.processes)
        return {as_bytes(m).decode("utf-8", "replace") for m in members}

    async def queue_identities(self, queue: str) -> set[str]:
        """Identities that have beaten to ``queue``'s slot (they may own a list there)."""
        members = await self.client.smembers(self.keys.queue_identities(queue))
        return {as_bytes(m).decode("utf-8", "replace") for m in members}

    async def scanned_lists(self) -> set[tuple[str, str]]:
        """``(queue, identity)`` of every in-progress list, found by SCAN (on a cluster,
        of every primary): lists no registry knows (Redis lost the registries)."""
        found = set()
        async for key in self.client.scan_iter(match=self.keys.in_progress_pattern, count=1000):
            text = as_bytes(key).decode("utf-8", "replace")
            try:
                found.add(self.keys.identity_of_list(text))
            except ValueError:  # not one of ours after all
                continue
        return found

    async def beat_info(self, identity: str) -> dict[str, Any] | None:
        """What ``identity`` last said about itself (host, pid, queues, memory, loop lag)."""
        try:
            raw = await self.client.hget(self.keys.beats, identity)
        except ResponseError:  # the hash of another type: nothing said
            return None
        # Damaged (too deep, not UTF-8, not an object): nothing said either. Recovery of
        # a dead process must never wait on what it said about itself.
        return stored.json_object(raw)

    async def record_recovery(self, event: dict[str, Any], keep: int) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.lpush(self.keys.recoveries, json.dumps(event))
            pipe.ltrim(self.keys.recoveries, 0, keep - 1)
            await pipe.execute()

    async def forget(self, identity: str, queue: str | None, *, declared_dead: bool) -> bool:
        """Take a gone process out of ``queue``'s slot's registry (None: the namespace's),
        once its list there is empty and it is not alive (``forget.lua``)."""
        keys = self.keys
        if queue is None:
            script_keys = [keys.no_list(identity), keys.processes, keys.last_beat,
                           keys.process(identity), keys.declared_dead, keys.beats,
                           keys.workers(identity)]
        else:
            script_keys = [keys.in_progress(queue, identity), keys.queue_identities(queue),
                           keys.queue_last_beat(queue), keys.queue_process(queue, identity),
                           keys.queue_declared_dead(queue)]
        reply = await self.scripts.run("forget", script_keys,
                                       [identity, "1" if declared_dead else "0"])
        return int(reply) == 1

    async def list_head(self, key: str, count: int) -> list[bytes]:
        return [as_bytes(raw) for raw in await self.client.lrange(key, 0, count - 1)]

    async def bury_orphan(self, queue: str, raw: bytes, entry: bytes, jid: str | None,
                          error: str = "") -> bool:
        """File a parked repeat orphan of ``queue`` in its dead set (and count it); its
        status record says dead, with ``error``."""
        keys = self.keys
        script_keys = [keys.repeat_orphans(queue), keys.dead(queue),
                       keys.orphanings(queue, jid or "-")]
        if jid is not None and self.track_jobs:
            script_keys.append(keys.record(queue, jid))
        reply = await self.scripts.run(
            "bury_orphan", script_keys,
            [raw, entry, repr(time.time()), *self.trim("dead"), self.keep_status, error],
        )
        buried = int(reply) == 1
        if buried:
            try:
                await self.stats.add_stats(0, 1)
            except RedisError as exc:  # another slot: the burial is done
                log.warning("a repeat orphan was buried, but counting it failed: %s", exc)
        return buried

    async def park_unsettled(self, identity: str, queue: str, raw: bytes,
                             record: bytes) -> bool:
        keys = [self.keys.in_progress(queue, identity), self.keys.unsettled(queue)]
        return int(await self.scripts.run("park_unsettled", keys, [raw, record], durable=True)) == 1

    async def file_unsettled(
        self, queue: str, record: bytes, target: SetName, entry: bytes, delay: float
    ) -> bool:
        keys = [self.keys.unsettled(queue), self.zset_key(queue, target)]
        dead = target == "dead"
        args: list[Any] = [record, entry, repr(float(delay)), repr(time.time()),
                           *self.trim(target)]
        if self.track_jobs:
            args += [self.keys.record_prefix(queue), "dead" if dead else "retrying",
                     self.keep_status if dead else LIVE_TTL]
        return int(await self.scripts.run("file_unsettled", keys, args)) == 1

    async def orphan_counts(self, queue: str, jids: Sequence[str | None]) -> list[int]:
        """``orphan_count`` of each jid of ``queue`` (0 for None or an unreadable one)."""
        if not jids:
            return []
        values = await self.client.mget([self.keys.orphanings(queue, j or "-") for j in jids])
        counts = []
        for value in values:
            try:
                counts.append(int(value or 0))
            except ValueError:
                counts.append(0)
        return counts

    async def is_alive(self, identity: str) -> bool:
        """Whether ``identity``'s alive marker is there, with a TTL as every beat writes
        it: a key without one is no beat's (a co-tenant's), and must not keep a dead
        process's jobs waiting forever (``requeue.lua`` decides the same way)."""
        return int(await self.client.pttl(self.keys.process(identity))) > 0

    async def orphan_count(self, queue: str, jid: str) -> int:
        """How often ``jid`` was recovered from a dead process (0 if never)."""
        try:
            return int(await self.client.get(self.keys.orphanings(queue, jid)) or 0)
        except (ValueError, ResponseError):
            return 0

