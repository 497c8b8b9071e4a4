"""The admin's reads and writes of the jobs waiting on a queue: its list, the list of
each priority other than 0 that it has, and the list of each fair group that has jobs
waiting (``lua/_queue.lua``), seen as one queue.

Run order here is the strict one — the highest priority's list first, each list from
its fetch end, then each group's list in turn order — which is the fetch's order with
aging off and no groups; with aging on (the default), a job that waited long enough runs
ahead of its place here, and the fetch takes the groups' jobs in turn with the others. A
priority's list is found through the queue's set of levels, a group's through the
queue's ring, both read in one round trip; a queue that never had either pays one
SMEMBERS and one ZRANGE of keys that do not exist.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import redis

from cogworker_async.jobs import stored
from cogworker_async.jobs import wire as job_module
from cogworker_async.jobs.groups import group_of
from cogworker_async.jobs.priority import LEVELS
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.part import as_list
from cogworker_async.redis.store import Store

log = logging.getLogger(__name__)

LEVEL_NAMES: Final = frozenset(str(level) for level in LEVELS if level != 0)
MAX_IN_PROGRESS_READ: Final = 1000
"""Jobs of one process's in-progress list read to count what runs per group."""
MAX_LISTS_READ: Final = 100
"""Lists of one queue whose ends a look for one queued job reads (``queue_ends``): every
priority's, and the groups first in turn."""


@dataclass(frozen=True, slots=True)
class QueueHead:
    """How many jobs wait on a queue, the one waiting longest, how many of each priority
    (only the priorities that have jobs; a queue of plain jobs: ``{0: size}``) outside
    the groups, and how many of each group (the groups that have jobs waiting)."""

    size: int
    oldest: bytes | None
    by_priority: dict[int, int] = field(default_factory=dict)
    by_group: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueLists:
    """A queue's lists of waiting jobs, in run order: ``(key, priority or group)``."""

    levels: list[int]
    groups: list[str]


def _wrong_type(reply: Any) -> bool:
    return isinstance(reply, redis.exceptions.ResponseError) and "WRONGTYPE" in str(reply)


def _levels(reply: Any) -> list[int]:
    """A queue's levels in run order (0 among them), from its set's SMEMBERS reply; a set
    of another type (or a member that is not a level) names none."""
    named = {int(text) for member in (reply if isinstance(reply, set | list) else ())
             if (text := as_bytes(member).decode("utf-8", "replace")) in LEVEL_NAMES}
    return [level for level in LEVELS if level == 0 or level in named]


def _groups(reply: Any) -> list[str]:
    """A queue's groups in turn order, from its ring's ZRANGE reply ("", the jobs without
    a group, is not one: they are on the other lists)."""
    names = [as_bytes(member).decode("utf-8", "replace")
             for member in (reply if isinstance(reply, list) else ())]
    return [name for name in names if name]


def _enqueued_at(raw: bytes) -> float:
    payload = stored.json_object(raw)
    found = job_module.finite_number(payload.get("enqueued_at")) if payload else None
    return found if found is not None else float("inf")


class QueueReads:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.client = store.client
        self.keys = store.keys

    async def queue_lists(self, names: Sequence[str]) -> list[QueueLists]:
        """Each queue's priorities in run order (0, its list, always among them) and its
        groups with jobs waiting, in turn order."""
        if not names:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.smembers(self.keys.priority_levels(name))
                pipe.zrange(self.keys.groups(name), 0, -1)
            replies = await pipe.execute(raise_on_error=False)
        for name, reply in zip([n for n in names for _ in (0, 1)], replies, strict=True):
            if isinstance(reply, Exception) and not _wrong_type(reply):
                raise reply
            if isinstance(reply, Exception):
                log.warning("the priorities or groups of queue %r are unreadable: %s",
                            name, reply)
        return [QueueLists(_levels(replies[i]), _groups(replies[i + 1]))
                for i in range(0, len(replies), 2)]

    def _keys(self, name: str, lists: QueueLists) -> list[tuple[str, int | str]]:
        return [*((self.keys.priority_level(name, level), level) for level in lists.levels),
                *((self.keys.group(name, group), group) for group in lists.groups)]

    async def queue_heads(self, names: Sequence[str]) -> list[QueueHead]:
        """Each queue's ``QueueHead``, in two round trips. A list of the wrong type reads
        as empty rather than failing the whole page."""
        every = await self.queue_lists(names)
        async with self.client.pipeline(transaction=False) as pipe:
            for name, lists in zip(names, every, strict=True):
                for key, _ in self._keys(name, lists):
                    pipe.llen(key)
                    pipe.lindex(key, -1)
            replies = await pipe.execute(raise_on_error=False) if names else []
        heads: list[QueueHead] = []
        at = 0
        for name, lists in zip(names, every, strict=True):
            size, levels, groups, oldest = 0, {}, {}, []
            for _, which in self._keys(name, lists):
                length, head = replies[at], replies[at + 1]
                at += 2
                if isinstance(length, Exception) or isinstance(head, Exception) or not length:
                    continue
                size += int(length)
                if isinstance(which, str):
                    groups[which] = int(length)
                else:
                    levels[which] = int(length)
                if head is not None:
                    oldest.append(as_bytes(head))
            heads.append(QueueHead(size, min(oldest, key=_enqueued_at, default=None), levels,
                                   groups))
        return heads

    async def _lengths(self, name: str) -> list[tuple[str, int]]:
        """``(key, length)`` of each of a queue's lists, in run order (wrong type: 0)."""
        [lists] = await self.queue_lists([name])
        keys = [key for key, _ in self._keys(name, lists)]
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.llen(key)
            replies = await pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception) and not _wrong_type(reply):
                raise reply
        return [(key, 0 if isinstance(length, Exception) else int(length))
                for key, length in zip(keys, replies, strict=True)]

    async def queue_demand(self, names: Sequence[str], now: float) -> list[tuple[int, int]]:
        """Each queue's (due, running): its scheduled and retry entries due by ``now``
        (Redis' clock: the sets are read, nothing is promoted, so they count with no
        worker running) and its jobs on the in-progress lists of the processes
        registered in its slot. With its waiting jobs, what an autoscaler needs: the
        work there is now. Two round trips; a key of another type counts 0."""
        if not names:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.zcount(self.keys.schedule(name), "-inf", now)
                pipe.zcount(self.keys.retry(name), "-inf", now)
                pipe.smembers(self.keys.queue_identities(name))
            replies = await pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception) and not _wrong_type(reply):
                raise reply
        lists = [[self.keys.in_progress(name, as_bytes(identity).decode("utf-8", "replace"))
                  for identity in (replies[3 * i + 2] if isinstance(replies[3 * i + 2], set)
                                   else ())]
                 for i, name in enumerate(names)]
        async with self.client.pipeline(transaction=False) as pipe:
            for keys in lists:
                for key in keys:
                    pipe.llen(key)
            lengths = await pipe.execute(raise_on_error=False) if any(lists) else []
        demand: list[tuple[int, int]] = []
        at = 0
        for i, keys in enumerate(lists):
            running = sum(int(n) for n in lengths[at:at + len(keys)]
                          if not isinstance(n, Exception))
            at += len(keys)
            due = sum(int(n) for n in replies[3 * i:3 * i + 2] if not isinstance(n, Exception))
            demand.append((due, running))
        return demand

    async def groups_running(self, name: str) -> dict[str, int]:
        """Group -> its jobs of queue ``name`` running now (on the in-progress lists of the
        processes registered in the queue's slot, as the fetch counts them for
        ``group_limits``; each list read up to ``MAX_IN_PROGRESS_READ``)."""
        try:
            identities = await self.client.smembers(self.keys.queue_identities(name))
        except redis.exceptions.ResponseError as exc:
            if not _wrong_type(exc):
                raise
            return {}
        async with self.client.pipeline(transaction=False) as pipe:
            for identity in identities:
                pipe.lrange(self.keys.in_progress(name, as_bytes(identity).decode(
                    "utf-8", "replace")), 0, MAX_IN_PROGRESS_READ - 1)
            replies = await pipe.execute(raise_on_error=False)
        running: dict[str, int] = {}
        for reply in replies:
            for raw in reply if isinstance(reply, list) else ():
                group = group_of(as_bytes(raw))
                if group:
                    running[group] = running.get(group, 0) + 1
        return running

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
        [lists] = await self.queue_lists([name])
        total, found = 0, []
        for key, _ in self._keys(name, lists)[:MAX_LISTS_READ]:
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
        group = group_of(raw)
        key = self.keys.group(name, group) if group else self.keys.priority_level(
            name, job_module.priority_of(raw))
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
        """Delete a queue's jobs (of every priority and group: ``lua/clear_queue.lua``,
        one step, so a group pushed meanwhile is never left out of its ring), and forget
        its name if nothing else of the queue is left to find through it; returns how
        many jobs the queue held."""
        length, held = as_list(await self.store.scripts.run(
            "clear_queue", [self.keys.queue(name), *self._slot_holdings(name)], []))
        # The name is in the namespace's slot, not the queue's: no transaction spans
        # both on a cluster, so it is forgotten by a second command. Only when the queue
        # holds nothing else: forgotten, its scheduled, retrying and dead jobs would
        # vanish from the dashboard (and wait unpromoted), and a dead process's list
        # there would escape recovery.
        if int(held) == 0:
            await self.client.srem(self.keys.queues, name)
        return int(length)
