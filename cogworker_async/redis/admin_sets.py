"""Admin's sets: the schedule, retry and dead sets, one of each per queue (each in its
queue's hash slot, ``keys.py``), read and acted on as one: a part of ``Admin``, whose
operations on the sets are this part's (``admin.sets``).

"The dead set" a person sees is the union of every queue's, counted with one ZCARD each
and paged by merging them by score (``set_window``). The queues looked at are every
registered name plus the App's own (``set_queues``). An entry is acted on in the set of
the queue that holds it: its record carries that queue; given bytes alone, ``locate``
finds it (its JSON ``queue`` field first, then every queue's set). Bounded reads and
moves through the worker's own scripts, as everywhere in ``admin.py``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, NamedTuple

from redis.exceptions import NoPermissionError, ResponseError

from cogworker_async.jobs import stored
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import SetName, Store
from cogworker_async.settings import check_queue_name

log = logging.getLogger(__name__)

MERGE_DEPTH: Final = 1000
"""Entries of each queue's set a page may read to merge them: a page ending deeper
finds where each queue's share of it starts by score first (``_seek``), and then reads
one page's worth of each."""
SIGN: Final = 1 << 63
ALL_BITS: Final = (1 << 64) - 1


class SetEntry(NamedTuple):
    """A member of one queue's schedule, retry or dead set."""

    member: bytes
    score: float
    queue: str
    """The queue whose set holds it (the slot an action on it goes to)."""


def _unreadable(reply: Any, what: str) -> bool:
    """Is a pipelined reply a key of another type (shown empty, said in the log)? Any
    other error is raised: a refusal (NOPERM) or a lost link is the page's 503."""
    if not isinstance(reply, Exception):
        return False
    if isinstance(reply, ResponseError) and not isinstance(reply, NoPermissionError):
        log.warning("%s is unreadable: %s", what, reply)
        return True
    raise reply


class SetReads:
    """``queue_names``: the registry's names, as ``Admin`` reads them; ``known_queues``:
    the App's own queues."""

    def __init__(self, store: Store, known_queues: frozenset[str],
                 queue_names: Callable[[], Awaitable[list[str]]]) -> None:
        self.store = store
        self.client = store.client
        self.known_queues = known_queues
        self.queue_names = queue_names

    async def set_queues(self) -> list[str]:
        """The queues whose sets make up "the" schedule, retry and dead sets: every
        registered name a queue can have, and the App's own."""
        names = set(self.known_queues)
        for name in await self.queue_names():
            try:
                names.add(check_queue_name(name))
            except ValueError:  # not a queue's name: no set of its keys was ever written
                continue
        return sorted(names)

    def zset(self, queue: str, target: SetName) -> str:
        return self.store.zset_key(queue, target)

    async def set_sizes(self, targets: Sequence[SetName],
                        queues: Sequence[str] | None = None) -> list[int]:
        """Entries of each set (summed over the queues, or over ``queues``: a bounded
        read, ``admin/api.py``'s ``MAX_QUEUES_READ``), in one round trip."""
        names = await self.set_queues() if queues is None else \
            [name for name in queues if _is_queue_name(name)]
        sizes = await self._sizes([(name, target) for target in targets for name in names])
        return [sum(sizes[i * len(names):(i + 1) * len(names)]) for i in range(len(targets))]

    async def set_size(self, target: SetName) -> int:
        return (await self.set_sizes([target]))[0]

    async def _sizes(self, sets: Sequence[tuple[str, SetName]]) -> list[int]:
        """ZCARD of each ``(queue, set)``; a key of another type counts 0 (every page's
        header counts the sets: degrade, don't fail)."""
        if not sets:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for queue, target in sets:
                pipe.zcard(self.zset(queue, target))
            replies = await pipe.execute(raise_on_error=False)
        return [0 if _unreadable(reply, f"the {target} set of queue {queue!r}") else int(reply)
                for (queue, target), reply in zip(sets, replies, strict=True)]

    async def set_window(
        self, target: SetName, start: int, stop: int, *, newest_first: bool
    ) -> list[SetEntry]:
        """Members ``start``..``stop`` of every queue's set merged by score (or newest
        first), with their scores and queues. Equal scores are ordered by queue name,
        then as Redis orders them in their set: the same page twice is the same page."""
        names = await self.set_queues()
        sizes = await self._sizes([(name, target) for name in names])
        held = [name for name, size in zip(names, sizes, strict=True) if size > 0]
        if not held or start >= sum(sizes):
            return []
        if len(held) == 1:
            return await self._merged(target, held, [start], stop - start + 1, newest_first)
        if stop < MERGE_DEPTH:
            merged = await self._merged(target, held, [0] * len(held), stop + 1, newest_first)
            return merged[start:]
        firsts = await self._seek(target, held, start, newest_first)
        return await self._merged(target, held, firsts, stop - start + 1, newest_first)

    async def _merged(self, target: SetName, names: Sequence[str], firsts: Sequence[int],
                      count: int, newest_first: bool) -> list[SetEntry]:
        """The first ``count`` entries of the queues' sets merged, each set read from its
        rank ``firsts[i]`` on (its first ``count`` from there: no more can be shown)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for name, first in zip(names, firsts, strict=True):
                read = pipe.zrevrange if newest_first else pipe.zrange
                read(self.zset(name, target), first, first + count - 1, withscores=True)
            replies = await pipe.execute(raise_on_error=False)
        ranked: list[tuple[float, int, int, SetEntry]] = []
        for index, (name, reply) in enumerate(zip(names, replies, strict=True)):
            if _unreadable(reply, f"the {target} set of queue {name!r}"):
                continue
            for rank, (member, score) in enumerate(_pairs(reply)):
                ranked.append((-score if newest_first else score, index, rank,
                               SetEntry(member, score, name)))
        ranked.sort(key=lambda item: item[:3])
        return [entry for *_, entry in ranked[:count]]

    async def _seek(self, target: SetName, names: Sequence[str], position: int,
                    newest_first: bool) -> list[int]:
        """For each queue, how many of its entries come before merged ``position``: the
        ranks a deep page reads from, found with counts alone (no set is read whole).

        The score of the entry at ``position`` is bisected over the doubles between the
        lowest and highest score (at most 64 steps: their order as 64-bit integers), each
        step one ZCOUNT per queue; entries sharing that score are then shared out in
        queue order, as ``_merged`` orders them."""
        keys = [self.zset(name, target) for name in names]
        low, high = await self._score_bounds(keys)
        while low < high:
            if newest_first:  # the highest score with more than ``position`` at or above it
                middle = (low + high + 1) // 2
                if await self._count(keys, _double(middle), newest_first) > position:
                    low = middle
                else:
                    high = middle - 1
            else:  # the lowest score with more than ``position`` at or below it
                middle = (low + high) // 2
                if await self._count(keys, _double(middle), newest_first) > position:
                    high = middle
                else:
                    low = middle + 1
        before, ties = await self._around(keys, _double(low), newest_first)
        left, firsts = position - sum(before), []
        for ahead, tied in zip(before, ties, strict=True):
            taken = min(left, tied)
            firsts.append(ahead + taken)
            left -= taken
        return firsts

    async def _score_bounds(self, keys: Sequence[str]) -> tuple[int, int]:
        """The lowest and highest score over ``keys``, in the order of ``_ordered``."""
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zrange(key, 0, 0, withscores=True)
                pipe.zrange(key, -1, -1, withscores=True)
            replies = await pipe.execute()
        scores = [score for reply in replies for _, score in _pairs(reply)]
        if not scores:  # emptied since they were counted: any bound reads nothing
            return _ordered(0.0), _ordered(0.0)
        return _ordered(min(scores)), _ordered(max(scores))

    async def _count(self, keys: Sequence[str], score: float, newest_first: bool) -> int:
        """Entries at or below ``score`` (at or above it, newest first), over ``keys``."""
        low, high = (_bound(score), "+inf") if newest_first else ("-inf", _bound(score))
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zcount(key, low, high)
            return sum(int(reply) for reply in await pipe.execute())

    async def _around(self, keys: Sequence[str], score: float,
                      newest_first: bool) -> tuple[list[int], list[int]]:
        """Per key: entries strictly before ``score`` in the page order, and at it."""
        before = (f"({_bound(score)}", "+inf") if newest_first else ("-inf",
                                                                       f"({_bound(score)}")
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zcount(key, *before)
                pipe.zcount(key, _bound(score), _bound(score))
            replies = [int(reply) for reply in await pipe.execute()]
        return replies[0::2], replies[1::2]

    async def set_at_score(
        self, target: SetName, score: float, start: int, count: int,
        queues: Sequence[str] | None = None,
    ) -> dict[str, list[bytes]]:
        """Per queue (every one unless ``queues`` names some), up to ``count`` members
        whose score is exactly ``score``, from the ``start``-th of them in that queue's
        set (how an entry is found again), in one round trip."""
        names = list(queues) if queues is not None else await self.set_queues()
        if not names:
            return {}
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.zrangebyscore(self.zset(name, target), score, score, start=start,
                                   num=count)
            replies = await pipe.execute(raise_on_error=False)
        return {name: [as_bytes(m) for m in reply if isinstance(m, bytes | str)]
                for name, reply in zip(names, replies, strict=True)
                if not _unreadable(reply, f"the {target} set of queue {name!r}")}

    async def set_scan(
        self, target: SetName, queue: str, pattern: str, cursor: int, count: int
    ) -> tuple[int, list[SetEntry]]:
        """One ZSCAN step with a MATCH pattern over ``queue``'s set: (next cursor,
        matches). Cursor 0 = that queue's set is done (a search walks the queues one
        after the other: ``JobSet.search``)."""
        try:
            cursor, reply = await self.client.zscan(self.zset(queue, target), cursor,
                                                    match=pattern, count=count)
        except ResponseError as exc:
            _unreadable(exc, f"the {target} set of queue {queue!r}")
            return 0, []
        return int(cursor), [SetEntry(member, score, queue) for member, score in _pairs(reply)]

    async def locate(self, target: SetName, members: Sequence[bytes],
                     queues: Sequence[str | None] | None = None) -> list[str | None]:
        """The queue whose ``target`` set holds each member (None: in none of them).

        A member whose queue is given is looked for there alone (no move takes a job to
        another queue's set). Else its JSON ``queue`` field is tried first, then every
        queue's set: the member is found wherever it is, whatever its bytes say."""
        given = list(queues) if queues is not None else [None] * len(members)
        guesses = [queue if queue is not None else _queue_field(member)
                   for member, queue in zip(members, given, strict=True)]
        found = await self._scored(target, list(zip(guesses, members, strict=True)))
        lost = [i for i, queue in enumerate(found) if queue is None and given[i] is None]
        if lost:
            names = await self.set_queues()
            tries = [(name, members[i]) for i in lost for name in names]
            where = await self._scored(target, tries)
            for n, i in enumerate(lost):
                found[i] = next((q for q in where[n * len(names):(n + 1) * len(names)]
                                 if q is not None), None)
        return found

    async def _scored(self, target: SetName,
                      tries: Sequence[tuple[str | None, bytes]]) -> list[str | None]:
        """For each ``(queue, member)``: the queue if its set holds the member, else None."""
        asked = [(queue, member) for queue, member in tries if queue is not None]
        replies: list[Any] = []
        if asked:
            async with self.client.pipeline(transaction=False) as pipe:
                for queue, member in asked:
                    pipe.zscore(self.zset(queue, target), member)
                replies = await pipe.execute(raise_on_error=False)
        answers = iter(replies)
        found: list[str | None] = []
        for name, _ in tries:
            reply = next(answers) if name is not None else None
            there = (reply is not None
                     and not _unreadable(reply, f"the {target} set of queue {name!r}"))
            found.append(name if there else None)
        return found

    async def set_contains(self, target: SetName, members: Sequence[bytes],
                           queues: Sequence[str | None] | None = None) -> list[bool]:
        """Whether each member is (still) in its queue's set (``locate``)."""
        if not members:
            return []
        return [queue is not None for queue in await self.locate(target, members, queues)]

    async def set_remove(self, target: SetName, members: Sequence[bytes],
                         queues: Sequence[str | None] | None = None) -> list[bool]:
        """Remove members; whether each one was there (and so was removed by this call).
        A member whose queue is not given is looked for first (``locate``)."""
        if not members:
            return []
        where: list[str | None] = list(queues) if queues is not None else [None] * len(members)
        unknown = [i for i, queue in enumerate(where) if queue is None]
        if unknown:
            located = await self.locate(target, [members[i] for i in unknown])
            for i, queue in zip(unknown, located, strict=True):
                where[i] = queue
        async with self.client.pipeline(transaction=False) as pipe:
            for member, queue in zip(members, where, strict=True):
                if queue is not None:
                    pipe.zrem(self.zset(queue, target), member)
            replies = iter(await pipe.execute())
        removed = [queue is not None and int(next(replies)) == 1 for queue in where]
        if target != "dead":  # a job that waited will never run: its record says so
            await self.store.close_records([(queue, member) for member, queue, gone in zip(
                members, where, removed, strict=True) if gone and queue is not None])
        return removed

    async def set_clear(self, target: SetName) -> int:
        """Delete every queue's set; returns how many entries they held."""
        cleared = 0
        for name in await self.set_queues():
            # Counted and deleted in one transaction on the queue's own slot.
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.zcard(self.zset(name, target))
                # freed in the background; raw, as in queue_clear
                pipe.execute_command("UNLINK", self.zset(name, target))
                size, _ = await pipe.execute()
            cleared += int(size)
        return cleared

    async def set_to_queues(
        self, target: SetName, items: Sequence[tuple[bytes, bytes, str]]
    ) -> int:
        """Move ``(member, job to push, queue)`` items from ``queue``'s set onto that
        queue (``promote``, one call per queue: each is one slot)."""
        grouped: dict[str, list[tuple[bytes, bytes]]] = {}
        for member, job, queue in items:
            grouped.setdefault(queue, []).append((member, job))
        moved = 0
        for queue, pairs in grouped.items():
            moved += await self.store.promote(queue, target, pairs)
        return moved

    async def set_move(
        self, source: SetName, target: SetName, member: bytes, entry: bytes,
        queue: str | None = None,
    ) -> bool:
        """Move one member to another set of its queue, scored now (``move_member``);
        False if it is gone. Its queue is looked for when not given (``locate``)."""
        if queue is None:
            [queue] = await self.locate(source, [member])
            if queue is None:
                return False
        return await self.store.move_member(queue, source, target, member, entry)


def _is_queue_name(name: str) -> bool:
    try:
        check_queue_name(name)
    except (TypeError, ValueError):
        return False
    return True


def _queue_field(member: bytes) -> str | None:
    """A stored job's ``queue`` field if it names a queue (else None)."""
    payload = stored.json_value(member, max_depth=None)  # a job: only its queue is read
    payload = payload if isinstance(payload, dict) else None
    try:
        return check_queue_name(payload.get("queue")) if payload is not None else None
    except (TypeError, ValueError):
        return None


def _ordered(score: float) -> int:
    """A double as an unsigned 64-bit integer in the same order (for bisection)."""
    (bits,) = struct.unpack(">Q", struct.pack(">d", score))
    return int(bits ^ ALL_BITS if bits & SIGN else bits | SIGN)


def _double(key: int) -> float:
    """``_ordered``'s inverse."""
    bits = key ^ SIGN if key & SIGN else key ^ ALL_BITS
    (score,) = struct.unpack(">d", struct.pack(">Q", bits))
    return float(score)


def _bound(score: float) -> str:
    """A score as a ZCOUNT bound, exactly (``repr`` round-trips a double; Redis reads
    ``inf`` and ``-inf``)."""
    return repr(float(score))


def _pairs(reply: Any) -> list[tuple[bytes, float]]:
    """``(member, score)`` pairs of a WITHSCORES reply."""
    return [(as_bytes(member), float(score)) for member, score in reply]
