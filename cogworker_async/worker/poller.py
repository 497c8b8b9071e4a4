"""Poller: moves scheduled and retry jobs onto their queues once they are due.

Due is judged by Redis' clock (inside ``due.lua``), never this process's. Each job is
pushed on its queue before it is removed from its set (``promote.lua``), so it is always
in at least one place, and a member moved by another process meanwhile is skipped.
An entry that is not a job goes to dead with its bytes kept.

Every ``LEVELS_EVERY`` seconds it also names again, in each served queue's set of
priority levels, a level whose list holds jobs but that the set lost (eviction, a hand):
the fetch reads only the levels the set names.

Each queue has its own schedule and retry sets (in its slot): a worker polls those of
the queues it serves. A job scheduled on a queue no worker serves waits in its set —
it could not run before a worker for that queue starts anyway.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Final

import anyio

from cogworker_async.errors import UnparseablePayload
from cogworker_async.jobs import wire
from cogworker_async.redis.errors import Unavailable
from cogworker_async.redis.store import SetName, Store
from cogworker_async.settings import Settings
from cogworker_async.worker.streak import Streak

log = logging.getLogger(__name__)

BATCH: Final = 100
"""Due entries moved per round trip."""

SETS: Final[tuple[SetName, ...]] = ("schedule", "retry")
LEVELS_EVERY: Final = 60.0
"""Seconds between two checks that each queue's set of priority levels names every
level holding jobs (``Store.name_levels``: one pipeline a queue)."""


class Poller:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.queues = list(dict.fromkeys(settings.queue_names))
        self.streak = Streak("poller: moving due jobs")
        self._levels_at = time.monotonic() + random.uniform(0, LEVELS_EVERY)

    async def run(self) -> None:
        """Poll forever at a jittered interval (so processes don't poll in lockstep)."""
        interval = self.settings.poll_interval
        await anyio.sleep(random.uniform(0, min(interval, 0.5)))
        while True:
            await self.poll_once()
            await anyio.sleep(interval * random.uniform(0.5, 1.5))

    async def poll_once(self) -> None:
        """One pass over both sets, each tried even when the other fails (a bad key in
        one must not hold up the other). Through an outage the streak says so once, not
        once per set per pass; one bad pass never stops the poller."""
        failure: Exception | None = None
        levels_due = time.monotonic() >= self._levels_at
        if levels_due:
            self._levels_at = time.monotonic() + LEVELS_EVERY
        for queue in self.queues:
            for target in SETS:
                try:
                    await self.promote_due(queue, target)
                except Exception as exc:
                    failure = failure or exc
            if levels_due:  # a level its set lost would never be fetched again
                try:
                    await self.store.name_levels(queue)
                except Exception as exc:
                    failure = failure or exc
        if failure is None:
            self.streak.succeeded()
        else:  # Unavailable is Redis away or refusing; anything else is a bug: traced
            self.streak.failed(failure, trace=not isinstance(failure, Unavailable))

    async def promote_due(self, queue: str, target: SetName) -> int:
        """Move every due entry of ``queue``'s ``target`` set onto it; returns how many."""
        moved = 0
        while True:
            members = await self.store.due(queue, target, BATCH)
            items: list[tuple[bytes, bytes]] = []
            for member in members:
                item = await self._prepare(queue, target, member)
                if item is not None:
                    items.append(item)
            moved += await self.store.promote(queue, target, items)
            if len(members) < BATCH:
                return moved

    async def _prepare(self, queue: str, target: SetName,
                       member: bytes) -> tuple[bytes, bytes] | None:
        """The ``(member, job to push)`` for a due entry, or None if it went to dead."""
        now = time.time()
        try:
            payload = wire.decode(member, self.settings.max_payload_bytes)
        except UnparseablePayload as exc:
            entry = wire.unparseable_entry(member, queue=queue, reason=str(exc), now=now)
            await self.store.move_member(queue, target, "dead", member,
                                         wire.encode(entry, wire.NO_SIZE_LIMIT))
            log.error("poller: an unreadable %s entry was moved to dead: %s", target, exc)
            return None
        payload["queue"] = queue  # the set's queue: the job stays in its slot
        payload["enqueued_at"] = now
        return member, wire.encode(payload, wire.NO_SIZE_LIMIT)
