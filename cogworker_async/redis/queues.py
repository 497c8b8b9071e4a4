"""Queues: the namespace's registry of queue names, the wake-up channel idle workers
listen on, and how much waits to run (``run --burst``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import redis.asyncio

from cogworker_async.errors import WrongTypeKey
from cogworker_async.jobs.priority import LEVELS
from cogworker_async.redis import sentinel
from cogworker_async.redis.cluster import ClusterClient
from cogworker_async.redis.errors import LostReply, RedisError, ResponseError
from cogworker_async.redis.part import Part, Shared, as_bytes, wrong_type

log = logging.getLogger(__name__)

NOTES_WAKE: Final = "notes\t"
"""A wake-up message that says a note was written in the queue named after it
(``_record.lua``): no queue name holds a tab, so no enqueue's wake-up reads as one."""
REGISTER_EVERY: Final = 60.0
"""Seconds after which a Store registers a queue name again on its next enqueue."""


async def _wake_messages(client: redis.asyncio.Redis,
                         pubsub: redis.asyncio.client.PubSub) -> AsyncIterator[str]:
    """Each message on ``pubsub`` (subscribed already), as text."""
    if not sentinel.follows(client):
        async for message in pubsub.listen():
            if message.get("type") == "message":
                yield _data(message)
        return
    # Behind sentinels, a subscriber stays on a replaced master until Sentinel demotes
    # it (seconds, hearing no wake-up): looked at every FOLLOW_EVERY, and given up as a
    # lost connection once the master moved (the caller subscribes again).
    while True:
        message = await pubsub.get_message(timeout=sentinel.FOLLOW_EVERY)
        if message is not None and message.get("type") == "message":
            yield _data(message)
        if await sentinel.replaced(client, pubsub.connection):
            raise LostReply("the wake-up channel's node is no longer the master "
                            "(a Sentinel failover)")


def _data(message: Mapping[str, Any]) -> str:
    data = message.get("data")
    return as_bytes(data).decode("utf-8", "replace") if isinstance(data, bytes | str) else ""


class QueuesPart(Part):
    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self._registered: dict[str, float] = {}
        """Queue name -> when this Store last registered it (``time.monotonic``)."""

    async def register_queues(self, queues: Sequence[str], *, required: bool = True) -> bool:
        """Record queue names in the namespace's registry (the dashboard and recovery
        find each queue's slot through it). It is another slot than the queue's, so never
        in the enqueue script itself: written before the first push, so a queue with jobs
        is registered, then again every ``REGISTER_EVERY`` seconds at most (Redis may
        have lost the set: a restart without persistence, a failover). True if it sent.

        The registry of another type (a co-tenant's key): ``required`` (a push follows)
        raises ``WrongTypeKey`` naming it, before anything is pushed; else (a worker's
        own queues, which it serves and recovers whatever the registry holds) it is said
        in the log, at most once a ``REGISTER_EVERY``, and the worker goes on."""
        now = time.monotonic()
        new = [queue for queue in dict.fromkeys(queues)
               if now - self._registered.get(queue, -REGISTER_EVERY) >= REGISTER_EVERY]
        if new:
            # Through the lane: it replaces a dead idle connection before sending (an
            # enqueue right after a Redis restart must not fail on the pool's).
            try:
                await self.scripts.lane.call(b"SADD", self.keys.queues, *new)
            except ResponseError as exc:
                if not wrong_type(exc):
                    raise
                said = (f"the set of queue names {self.keys.queues!r} holds another type "
                        f"({exc}): delete that key")
                if required:
                    raise WrongTypeKey(f"{said}; nothing was enqueued", self.keys.queues) \
                        from exc
                self._registered.update(dict.fromkeys(new, now))
                log.error("%s (queues %s are not registered: the dashboard and the relay "
                          "of unserved queues miss them)", said, ", ".join(new))
                return False
            self._registered.update(dict.fromkeys(new, now))
        return bool(new)

    async def queue_names(self) -> list[str]:
        """Every registered queue name, sorted (none when the registry is a key of
        another type: a co-tenant's, said each call)."""
        try:
            names = await self.client.smembers(self.keys.queues)
        except ResponseError as exc:
            if not wrong_type(exc):
                raise
            log.warning("the set of queue names is unreadable: %s", exc)
            return []
        return sorted(as_bytes(name).decode("utf-8", "replace") for name in names)

    @asynccontextmanager
    async def wake_ups(self) -> AsyncIterator[AsyncIterator[str]]:
        """Subscribe to the wake channel; iterate for each message (an enqueue's
        wake-up names its queue; a note's is ``NOTES_WAKE`` + its queue: ``_record.lua``).
        Entered once the server confirmed the subscription: a stale pooled connection
        after a restart fails here, not after the caller counted the channel as back."""
        if isinstance(self.client, ClusterClient):  # its pub/sub node is from the slot map
            await self.client.initialize()
        pubsub = self.client.pubsub()
        try:
            await pubsub.subscribe(self.keys.wake_channel)
            async for confirmation in pubsub.listen():
                if confirmation.get("type") == "subscribe":
                    break

            yield _wake_messages(self.client, pubsub)
        except (RedisError, OSError):
            if isinstance(self.client, ClusterClient):
                # Its node may be gone (a failover): the map is read again before the
                # next try, or every try would go to the dead node.
                self.client.mark_stale()
            raise
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]

    async def name_levels(self, queue: str) -> list[int]:
        """Name again, in ``queue``'s set of priority levels, each level whose list holds
        jobs but that the set lost (evicted under an ``allkeys-*`` policy, deleted by a
        hand): the fetch looks only at the levels the set names, so such a level's jobs
        would wait forever. Returns the levels named again. Idempotent (SADD); a set of
        another type is left to the fetch, which then looks at every level."""
        levels = [level for level in LEVELS if level != 0]
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.smembers(self.keys.priority_levels(queue))
            for level in levels:
                pipe.llen(self.keys.priority_level(queue, level))
            replies = await pipe.execute(raise_on_error=False)
        named, lengths = replies[0], replies[1:]
        if isinstance(named, Exception):
            if wrong_type(named):
                return []
            raise named
        known = {as_bytes(member) for member in named}
        lost = [level for level, length in zip(levels, lengths, strict=True)
                if isinstance(length, int) and length > 0
                and str(level).encode() not in known]
        if lost:
            await self.client.sadd(self.keys.priority_levels(queue), *lost)
            log.warning("queue %r: its set of priority levels had lost %s, whose lists "
                        "hold jobs: named again", queue, ", ".join(map(str, lost)))
        return lost

    async def backlog(self, queues: Sequence[str], ahead: float = 0.0,
                      ) -> tuple[int, list[str]]:
        """Jobs of ``queues`` waiting to run now: queued, plus scheduled and retry
        entries due now or within ``ahead`` seconds (``run --burst`` stops when it is 0;
        ``--burst-wait S`` looks S ahead), and the names of those keys that hold another
        type (WRONGTYPE: nothing this worker can run is there, so they count 0). One
        pipeline; by Redis TIME."""
        seconds, micros = await self.client.time()
        now = repr(int(seconds) + int(micros) / 1_000_000 + ahead)
        # Every priority's list (lua/_queue.lua): an LLEN of a key that does not exist
        # costs next to nothing, and needs no read of the levels first.
        # A group's jobs count as one while any wait (the ring has a member per group that
        # has some): enough for ``run --burst``, which asks only whether anything waits.
        names = [name for queue in queues for name in (
            *(self.keys.priority_level(queue, level) for level in LEVELS),
            self.keys.groups(queue), self.keys.schedule(queue), self.keys.retry(queue))]
        async with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                for level in LEVELS:
                    pipe.llen(self.keys.priority_level(queue, level))
                pipe.zcard(self.keys.groups(queue))
                pipe.zcount(self.keys.schedule(queue), "-inf", now)
                pipe.zcount(self.keys.retry(queue), "-inf", now)
            counts = await pipe.execute(raise_on_error=False)
        for count in counts:  # an outage is no empty queue: raised as it would be
            if isinstance(count, Exception) and not wrong_type(count):
                raise count
        damaged = [name for name, count in zip(names, counts, strict=True)
                   if isinstance(count, Exception)]
        return sum(int(count) for count in counts if not isinstance(count, Exception)), damaged

