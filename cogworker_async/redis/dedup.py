"""Dedup modes' moves (``dedup.py`` says what each mode means): a throttle's window taken
with the push (``enqueue_unique.lua``, its lock a window no run releases), a debounced
job moved (``debounce.lua``), a coalesced job merged or followed (``coalesce.lua``). Each
is one script on the queue's slot: the key's state and the job are written in one step,
so concurrent enqueuers of one key keep the rule exactly."""

from __future__ import annotations

import time
from typing import Final

from cogworker_async.jobs import wire
from cogworker_async.jobs.dedup import placed
from cogworker_async.jobs.status import LIVE_TTL
from cogworker_async.redis.batches import foreign
from cogworker_async.redis.errors import ResponseError
from cogworker_async.redis.part import Part, Shared, as_bytes, as_list
from cogworker_async.redis.queues import QueuesPart

DEBOUNCE_KEPT: Final = 24 * 3600
"""Seconds a debounced key's state outlives its job's due time (a poller that is late
that long lets the next enqueue make a second job, never lose one)."""


class Dedup(Part):
    def __init__(self, shared: Shared, queues: QueuesPart) -> None:
        super().__init__(shared)
        self.queues = queues

    async def throttle(self, digest: str, jid: str, seconds: float, queue: str, raw: bytes,
                       *, at: float | None, delay: float | None, name: str) -> bool:
        """Push (or schedule) ``raw`` if no job of ``digest`` was pushed in the last
        ``seconds``; False (nothing written) if one was."""
        await self.queues.register_queues([queue])
        mode, value, target = "now", 0.0, self.keys.queue(queue)
        if at is not None:
            mode, value, target = "at", at, self.keys.schedule(queue)
        elif delay is not None:
            mode, value, target = "in", delay, self.keys.schedule(queue)
        keys = [self.keys.throttle(queue, digest), target]
        if self.track_jobs:
            keys.append(self.keys.record(queue, jid))
        args = [jid, max(1, int(seconds * 1000)), mode, repr(float(value)), queue,
                self.keys.wake_channel, repr(time.time()), raw, LIVE_TTL, name, "0", "",
                "throttle"]
        reply = await self.scripts.run("enqueue_unique", keys, args, durable=True)
        return int((as_list(reply) or [reply])[0]) == 1  # 1, or {1, a refused wake-up}

    async def debounce(self, digest: str, jid: str, seconds: float, queue: str, raw: bytes,
                       *, name: str, jid_at: int | None = None) -> tuple[bool, str]:
        """Schedule ``raw`` ``seconds`` from now, or move the key's job that still waits
        there (with ``raw``'s arguments): (whether a new job was made, the jid that
        runs). ``jid_at``: the bytes of ``raw`` before its jid (None: found here,
        ``dedup.placed``). ``WrongTypeKey``: a key it writes holds another type (a
        co-tenant's): nothing was written."""
        if jid_at is None:
            raw, jid_at = placed(raw, jid)
        await self.queues.register_queues([queue])
        try:
            reply = as_list(await self.scripts.run(
                "debounce", [self.keys.debounce(queue, digest), self.keys.schedule(queue)],
                [jid, raw, repr(float(seconds)), repr(time.time()), self.record_prefix(queue),
                 LIVE_TTL, name, DEBOUNCE_KEPT, jid_at], durable=True))
        except ResponseError as exc:
            if (refused := foreign(exc, f"debounce job {jid}")) is not None:
                raise refused from None
            raise
        return int(reply[0]) == 1, as_bytes(reply[1]).decode()

    async def coalesce(self, digest: str, jid: str, queue: str, raw: bytes, *,
                       name: str, jid_at: int | None = None) -> tuple[str, str]:
        """Push ``raw``, or merge it into the key's job that waits, or make it the one
        follow-up of the key's job that runs: (``new``, ``merged`` or ``following``, the
        jid that runs it). ``jid_at``, ``WrongTypeKey``: as ``debounce``'s."""
        if jid_at is None:
            raw, jid_at = placed(raw, jid)
        await self.queues.register_queues([queue])
        try:
            reply = as_list(await self.scripts.run(
                "coalesce", [self.keys.coalesce(queue, digest), self.keys.queue(queue)],
                [jid, raw, repr(time.time()), self.record_prefix(queue), LIVE_TTL, name,
                 queue, self.keys.wake_channel, LIVE_TTL, jid_at], durable=True))
        except ResponseError as exc:
            if (refused := foreign(exc, f"coalesce job {jid}")) is not None:
                raise refused from None
            raise
        return as_bytes(reply[0]).decode(), as_bytes(reply[1]).decode()

    async def popped(self, queue: str, raw: bytes) -> bytes:
        """A job of a coalesced key popped by a basic-fetch worker (``coalesce_popped.lua``):
        the job to run (with the arguments merged into it while it waited); its record no
        longer takes merges. Whatever this App's ``track_jobs``: the record is the
        enqueuer's."""
        jid = wire.jid_of(raw)
        if jid is None:
            return raw
        reply = await self.scripts.run("coalesce_popped", [self.keys.record(queue, jid)],
                                       [raw])
        return as_bytes(reply) if isinstance(reply, bytes | str) else raw
