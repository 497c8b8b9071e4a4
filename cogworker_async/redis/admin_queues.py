"""The admin's reads and writes of the jobs waiting on a queue: its list, and the list of
each priority other than 0 that it has (``lua/_queue.lua``), seen as one queue.

Run order here is the strict one — the highest priority's list first, each list from
its fetch end — which is the fetch's order with aging off; with aging on (the default),
a job that waited long enough runs ahead of its place here. A priority's list is found
through the queue's set of levels, read in the same round trip as the lengths; a queue
that never had a priority pays one SMEMBERS of a key that does not exist.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import redis

from cogworker_async import job as job_module
from cogworker_async import stored
from cogworker_async.priority import LEVELS
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import Store

log = logging.getLogger(__name__)

LEVEL_NAMES: Final = frozenset(str(level) for level in LEVELS if level != 0)


@dataclass(frozen=True, slots=True)
class QueueHead:
    """How many jobs wait on a queue, the one waiting longest, and how many of each
    priority (only the priorities that have jobs; a queue of plain jobs: ``{0: size}``)."""

    size: int
    oldest: bytes | None
    by_priority: dict[int, int] = field(default_factory=dict)


def _wrong_type(reply: Any) -> bool:
    return isinstance(reply, redis.exceptions.ResponseError) and "WRONGTYPE" in str(reply)


def _levels(reply: Any) -> list[int]:
    """A queue's levels in run order (0 among them), from its set's SMEMBERS reply; a set
    of another type (or a member that is not a level) names none."""
    named = {int(text) for member in (reply if isinstance(reply, set | list) else ())
             if (text := as_bytes(member).decode("utf-8", "replace")) in LEVEL_NAMES}
    return [level for level in LEVELS if level == 0 or level in named]


def _enqueued_at(raw: bytes) -> float:
    payload = stored.json_object(raw)
    found = job_module.finite_number(payload.get("enqueued_at")) if payload else None
    return found if found is not None else float("inf")


class QueueReads:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.client = store.client
        self.keys = store.keys

    async def queue_levels(self, names: Sequence[str]) -> list[list[int]]:
        """Each queue's priorities in run order (0, its list, always among them)."""
        if not names:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.smembers(self.keys.priority_levels(name))
            replies = await pipe.execute(raise_on_error=False)
        for name, reply in zip(names, replies, strict=True):
            if isinstance(reply, Exception) and not _wrong_type(reply):
                raise reply
            if isinstance(reply, Exception):
                log.warning("the priority levels of queue %r are unreadable: %s", name, reply)
        return [_levels(reply) for reply in replies]

    async def queue_heads(self, names: Sequence[str]) -> list[QueueHead]:
        """Each queue's ``QueueHead``, in two round trips. A list of the wrong type reads
        as empty rather than failing the whole page."""
        levels = await self.queue_levels(names)
        async with self.client.pipeline(transaction=False) as pipe:
            for name, priorities in zip(names, levels, strict=True):
                for priority in priorities:
                    pipe.llen(self.keys.priority_level(name, priority))
                    pipe.lindex(self.keys.priority_level(name, priority), -1)
            replies = await pipe.execute(raise_on_error=False) if names else []
        heads: list[QueueHead] = []
        at = 0
        for priorities in levels:
            size, counts, oldest = 0, {}, []
            for priority in priorities:
                length, head = replies[at], replies[at + 1]
                at += 2
                if isinstance(length, Exception) or isinstance(head, Exception) or not length:
                    continue
                size += int(length)
                counts[priority] = int(length)
                if head is not None:
                    oldest.append(as_bytes(head))
            heads.append(QueueHead(size, min(oldest, key=_enqueued_at, default=None), counts))
        return heads

    async def _lengths(self, name: str) -> list[tuple[str, int]]:
        """``(key, length)`` of each of a queue's lists, in run order (wrong type: 0)."""
        [priorities] = await self.queue_levels([name])
        keys = [self.keys.priority_level(name, priority) for priority in priorities]
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.llen(key)
            replies = await pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception) and not _wrong_type(reply):
                raise reply
        return [(key, 0 if isinstance(length, Exception) else int(length))
                for key, length in zip(keys, replies, strict=True)]

    async def queue_window(self, name: str, start: int, stop: int) -> list[bytes]:
        """Jobs ``start``..``stop`` (inclusive) counted from the next to run (0), in run
        order across the queue's priorities."""
        taken: list[bytes] = []
        first = 0  # the run position of each list's next job
        for key, length in await self._lengths(name):
            low, high = max(start, first) - first, min(stop, first + length - 1) - first
            first += length
            if low > high:
                continue
            # Fetch takes from the right: index -1 runs next. Read the window from the
            # right and turn it round, so that its first job is the next to run.
            try:
                reply = await self.client.lrange(key, -high - 1, -low - 1)
            except redis.exceptions.ResponseError as exc:
                if not str(exc).startswith("WRONGTYPE"):
                    raise
                continue  # a key of another type reads as empty, as in queue_heads
            taken += [as_bytes(raw) for raw in reversed(reply)]
            if first > stop:
                break
        return taken

    async def queue_ends(self, name: str, count: int) -> tuple[int, list[bytes]]:
        """(length, jobs) of a queue: of each of its lists, its ``count`` newest and the
        ``count`` that run next, each once (a list of up to ``2 * count`` jobs: all of
        them). Where a bounded look for one queued job reads: one just enqueued or about
        to run is at an end, and a long list's middle is never loaded whole."""
        [priorities] = await self.queue_levels([name])
        total, found = 0, []
        for priority in priorities:
            key = self.keys.priority_level(name, priority)
            # One transaction (one key, one slot): the length and both ends of one list.
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.llen(key)
                pipe.lrange(key, 0, count - 1)
                pipe.lrange(key, -count, -1)
                try:
                    length, newest, next_up = await pipe.execute()
                except redis.exceptions.ResponseError as exc:
                    if "WRONGTYPE" not in str(exc):
                        raise
                    continue  # a key of another type reads as an empty list
            overlap = max(0, len(newest) + len(next_up) - int(length))
            total += int(length)
            found += [as_bytes(raw) for raw in [*newest, *next_up[overlap:]]]
        return total, found

    async def queue_remove(self, name: str, raw: bytes) -> bool:
        """Remove one job (exact bytes) from a queue; False if it is gone (it may have run)."""
        key = self.keys.priority_level(name, job_module.priority_of(raw))
        # redis-py types the value as str; the stored bytes are what must match.
        removed = int(await self.client.lrem(key, 1, raw)) == 1  # type: ignore[arg-type]
        if removed:  # it will never run: its status record says so
            await self.store.close_records([(name, raw)])
        return removed

    def _slot_holdings(self, name: str) -> list[str]:
        """The keys of a queue's slot that are found through the registry of names: its
        sets (the dashboard and the poller walk the registry to reach them), the
        identities that beat to it (recovery finds their lists through it), the jobs
        waiting to be filed (hand-overs, repeat orphans), and the jobs waiting for their
        parents (the dashboard counts and lists them through it)."""
        keys = self.keys
        return [keys.schedule(name), keys.retry(name), keys.dead(name),
                keys.queue_identities(name), keys.unsettled(name), keys.repeat_orphans(name),
                keys.waiting(name)]

    async def queue_clear(self, name: str) -> int:
        """Delete a queue's jobs (of every priority), and forget its name if nothing else
        of the queue is left to find through it; returns how many jobs the queue held."""
        lists = [self.keys.priority_level(name, level) for level in LEVELS]
        # One transaction on the queue's slot alone (a cluster allows no other). UNLINK
        # and EXISTS as raw commands: redis-py's cluster pipeline runs its own multi-key
        # methods at once (split per slot) instead of queueing them.
        async with self.client.pipeline(transaction=True) as pipe:
            for key in lists:
                pipe.llen(key)
            # freed in the background: a huge list must not block Redis (and the beats)
            pipe.execute_command("UNLINK", *lists, self.keys.priority_levels(name))
            pipe.execute_command("EXISTS", *self._slot_holdings(name))
            replies = await pipe.execute(raise_on_error=False)
        for reply in replies[len(lists):]:
            if isinstance(reply, Exception):
                raise reply
        length = sum(int(n) for n in replies[:len(lists)] if not isinstance(n, Exception))
        # The name is in the namespace's slot, not the queue's: no transaction spans
        # both on a cluster, so it is forgotten by a second command. Only when the queue
        # holds nothing else: forgotten, its scheduled, retrying and dead jobs would
        # vanish from the dashboard (and wait unpromoted), and a dead process's list
        # there would escape recovery.
        if int(replies[-1]) == 0:
            await self.client.srem(self.keys.queues, name)
        return length
