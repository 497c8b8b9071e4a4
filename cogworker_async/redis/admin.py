"""Admin: the reads and the admin writes behind the dashboard and the admin CLI.

Only this module and ``store.py`` speak Redis. Every read is bounded — a page, a
window, one scan step — so that no view ever loads a whole queue or set, however
large. Every write that moves a job goes through the worker's own scripts (``promote``,
``move_member``): written before removed, and a member that another process moved or
ran meanwhile is skipped, never duplicated.

The schedule, retry and dead sets are one per queue (each in its queue's hash slot,
``keys.py``): "the dead set" a person sees is the union of every queue's, counted with
one ZCARD each and paged by merging them by score (``set_window``). The queues looked at
are every registered name plus the App's own (``set_queues``). An entry is acted on in
the set of the queue that holds it: its record carries that queue; given bytes alone,
``locate`` finds it (its JSON ``queue`` field first, then every queue's set).

No transaction here spans two slots (a cluster refuses them): each one is on one
queue's keys, and a write to the namespace's slot (the registry) is a command of its own.
"""

from __future__ import annotations

import json
import logging
import math
import struct
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

import redis
from redis.exceptions import NoPermissionError, ResponseError

from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import ConnectionLost, SetName, Store
from cogworker_async.settings import check_queue_name

log = logging.getLogger(__name__)

RECOVERY_EVENTS_SHOWN: Final = 50
MAXMEMORY_POLICY: Final = "maxmemory-policy"
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


def _text(value: Any) -> str:
    return as_bytes(value).decode("utf-8", "replace")


def unreachable(exc: BaseException) -> bool:
    """Is ``exc`` Redis out of reach (down, a lost link, a timeout) rather than Redis
    answering no (a wrong password, NOPERM, OOM)? What an admin should look at differs."""
    if isinstance(exc, redis.exceptions.AuthenticationError):  # a ConnectionError, but
        return False  # Redis answered: it is the password that is wrong
    return isinstance(exc, ConnectionLost)


def _json_object(raw: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _unreadable(reply: Any, what: str) -> bool:
    """Is a pipelined reply a key of another type (shown empty, said in the log)? Any
    other error is raised: a refusal (NOPERM) or a lost link is the page's 503."""
    if not isinstance(reply, Exception):
        return False
    if isinstance(reply, ResponseError) and not isinstance(reply, NoPermissionError):
        log.warning("%s is unreadable: %s", what, reply)
        return True
    raise reply


def _one_node(reply: Any) -> dict[str, Any]:
    """An INFO or CONFIG GET reply as one server's fields. redis-py 8.1's cluster client
    sends both to its default node alone (``COMMAND_FLAGS``: DEFAULT_NODE) and returns
    that node's dict; asked of several nodes it returns ``{"host:port": {...}}``, of
    which the first node's (by name) is taken."""
    if not isinstance(reply, dict):
        return {}
    if reply and all(isinstance(value, dict) for value in reply.values()):
        first: dict[str, Any] = reply[min(reply, key=str)]
        return first
    return reply


class Admin:
    """Bounded reads and admin writes, on a Store's connection pool and key names.

    ``known_queues``: the App's own queues, whose sets are read even when the registry
    of names lacks them (Redis lost it, or a person cleared it)."""

    def __init__(self, store: Store, known_queues: Iterable[str] = ()) -> None:
        self.store = store
        self.client = store.client
        self.keys = store.keys
        self.known_queues = frozenset(known_queues)

    # -- totals and server -------------------------------------------------------------

    async def totals(self) -> tuple[int, int]:
        """(processed, failed) since the counters were created."""
        # Both keys are in the namespace's slot: one MGET, on a cluster too.
        processed, failed = await self.client.mget(
            [self.keys.stats_processed, self.keys.stats_failed])
        return _int(processed), _int(failed)

    async def daily(self, days: Sequence[str]) -> list[tuple[int, int]]:
        """(processed, failed) on each day (``YYYY-MM-DD``), in one round trip."""
        if not days:
            return []
        keys = [key for day in days
                for key in (self.keys.stats_processed_on(day), self.keys.stats_failed_on(day))]
        values = await self.client.mget(keys)
        return [(_int(values[i]), _int(values[i + 1])) for i in range(0, len(values), 2)]

    async def reset_totals(self) -> None:
        await self.client.delete(self.keys.stats_processed, self.keys.stats_failed)

    async def server_info(self) -> dict[str, Any] | None:
        """The server's name, version, memory and clients (INFO), as reported; None when
        the server refuses INFO (an ACL user with ``-info``, a managed Redis that renamed
        it): the views then say "n/a" rather than fail. On a cluster it is one node's
        (``cluster_nodes`` says of how many primaries; None on a single Redis)."""
        try:
            info = _one_node(await self.client.info())
        except ResponseError as exc:  # NOPERM, unknown command; a lost link still raises
            log.debug("INFO refused: %s", exc)
            return None
        return {
            "server": "valkey" if "valkey_version" in info else "redis",
            "version": str(info.get("valkey_version") or info.get("redis_version", "?")),
            "used_memory": _int(info.get("used_memory")),
            "used_memory_human": str(info.get("used_memory_human", "?")),
            "maxmemory": _int(info.get("maxmemory")),
            "connected_clients": _int(info.get("connected_clients")),
            "uptime_in_seconds": _int(info.get("uptime_in_seconds")),
            "cluster_nodes": self.cluster_nodes(),
        }

    def cluster_nodes(self) -> int | None:
        """How many primaries the cluster client knows (None on a single Redis)."""
        primaries = getattr(self.client, "get_primaries", None)
        if not self.store.cluster or primaries is None:
            return None
        try:
            return len(primaries())
        except Exception:  # not yet initialised, or a layout being re-read: not shown
            return None

    async def eviction_policy(self) -> str | None:
        """Redis' ``maxmemory-policy``, or None when it cannot be read.

        ``INFO memory`` first: ``CONFIG GET`` reads every setting (``requirepass``
        included), so a least-privilege user is not given it, and each refusal is an
        entry in the server's ACL LOG; asked only when INFO is refused or silent."""
        try:
            info = _one_node(await self.client.info("memory"))
        except ResponseError as exc:  # NOPERM, or renamed away
            log.debug("INFO memory refused: %s", exc)
        else:
            if info.get("maxmemory_policy"):
                return _text(info["maxmemory_policy"])
        try:
            reply = _one_node(await self.client.config_get(MAXMEMORY_POLICY))
        except ResponseError as exc:
            log.debug("CONFIG GET %s refused: %s", MAXMEMORY_POLICY, exc)
            return None
        # keys and values are str or bytes, by redis-py version and protocol
        found = [v for k, v in reply.items() if k and _text(k) == MAXMEMORY_POLICY]
        return _text(found[0]) if found and found[0] else None

    async def now(self) -> float:
        """Redis' clock (epoch s): ages are judged by the clock the scripts use."""
        reply: Any = await self.client.time()
        if isinstance(reply, dict):  # one reply per node, if ever asked of several
            reply = reply[min(reply, key=str)]
        seconds, micros = reply
        return float(seconds) + float(micros) / 1_000_000

    # -- queues ------------------------------------------------------------------------

    async def queue_names(self) -> list[str]:
        """The registry of queue names, as stored (odd ones too: the Queues tab shows
        them, and 404s the ones no queue can have)."""
        try:
            names = await self.client.smembers(self.keys.queues)
        except ResponseError as exc:  # a key of another type: shown empty, said once a call
            if isinstance(exc, NoPermissionError):
                raise
            log.warning("the set of queue names is unreadable: %s", exc)
            return []
        return sorted(_text(name) for name in names)

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

    async def queue_heads(self, names: Sequence[str]) -> list[tuple[int, bytes | None]]:
        """(length, oldest job) of each queue, in one round trip. A key of the wrong
        type reads as empty rather than failing the whole page."""
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.llen(self.keys.queue(name))
                pipe.lindex(self.keys.queue(name), -1)
            replies = await pipe.execute(raise_on_error=False) if names else []
        heads: list[tuple[int, bytes | None]] = []
        for i in range(0, len(replies), 2):
            length, oldest = replies[i], replies[i + 1]
            if isinstance(length, Exception) or isinstance(oldest, Exception):
                heads.append((0, None))
            else:
                heads.append((int(length), as_bytes(oldest) if oldest is not None else None))
        return heads

    async def queue_window(self, name: str, start: int, stop: int) -> list[bytes]:
        """Jobs ``start``..``stop`` (inclusive) counted from the next to run (0)."""
        # Fetch takes from the right: index -1 runs next. Read the window from the right
        # and turn it round, so that position 0 is the next job to run.
        try:
            reply = await self.client.lrange(self.keys.queue(name), -stop - 1, -start - 1)
        except redis.exceptions.ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                raise
            return []  # a key of another type reads as an empty queue, as in queue_heads
        return [as_bytes(raw) for raw in reversed(reply)]

    async def queue_remove(self, name: str, raw: bytes) -> bool:
        """Remove one job (exact bytes) from a queue; False if it is gone (it may have run)."""
        # redis-py types the value as str; the stored bytes are what must match.
        return int(await self.client.lrem(self.keys.queue(name), 1, raw)) == 1  # type: ignore[arg-type]

    def _slot_holdings(self, name: str) -> list[str]:
        """The keys of a queue's slot that are found through the registry of names: its
        sets (the dashboard and the poller walk the registry to reach them), the
        identities that beat to it (recovery finds their lists through it), and the
        jobs waiting to be filed (hand-overs, repeat orphans)."""
        keys = self.keys
        return [keys.schedule(name), keys.retry(name), keys.dead(name),
                keys.queue_identities(name), keys.unsettled(name), keys.repeat_orphans(name)]

    async def queue_clear(self, name: str) -> int:
        """Delete a queue's jobs, and forget its name if nothing else of the queue is
        left to find through it; returns how many jobs the queue held."""
        # One transaction on the queue's slot alone (a cluster allows no other). UNLINK
        # and EXISTS as raw commands: redis-py's cluster pipeline runs its own multi-key
        # methods at once (split per slot) instead of queueing them.
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.llen(self.keys.queue(name))
            pipe.execute_command("UNLINK", self.keys.queue(name))  # freed in the
            # background: a huge list must not block Redis (and the beats) meanwhile
            pipe.execute_command("EXISTS", *self._slot_holdings(name))
            length, _, held = await pipe.execute()
        # The name is in the namespace's slot, not the queue's: no transaction spans
        # both on a cluster, so it is forgotten by a second command. Only when the queue
        # holds nothing else: forgotten, its scheduled, retrying and dead jobs would
        # vanish from the dashboard (and wait unpromoted), and a dead process's list
        # there would escape recovery.
        if int(held) == 0:
            await self.client.srem(self.keys.queues, name)
        return int(length)

    # -- sorted sets: schedule, retry, dead (one of each per queue) ----------------------

    def zset(self, queue: str, target: SetName) -> str:
        return self.store.zset_key(queue, target)

    async def set_sizes(self, targets: Sequence[SetName]) -> list[int]:
        """Entries of each set (summed over the queues), in one round trip."""
        names = await self.set_queues()
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
        return [queue is not None and int(next(replies)) == 1 for queue in where]

    async def take_unique(self, digest: str, jid: str, ttl: float, queue: str) -> bool:
        """Take ``queue``'s unique lock for ``jid`` unless another jid holds it."""
        return await self.store.take_lock(self.keys.unique(queue, digest), jid, ttl)

    async def release_unique(self, digest: str, jid: str, queue: str) -> None:
        """Release ``queue``'s unique lock if ``jid`` still owns it (``release_lock``)."""
        await self.store.release_lock(self.keys.unique(queue, digest), jid)

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

    # -- processes -----------------------------------------------------------------------

    async def identities(self) -> list[str]:
        """Every identity that has beaten or is registered (``processes``)."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hkeys(self.keys.beats)
            pipe.smembers(self.keys.processes)
            beaten, registered = await pipe.execute(raise_on_error=False)
        names: set[str] = set()
        for reply in (beaten, registered):
            if not isinstance(reply, Exception):
                names.update(_text(name) for name in reply)
        return sorted(names)

    async def processes(self, identities: Sequence[str]) -> list[dict[str, Any]]:
        """For each identity: alive?, its beat info, last beat, in-progress count (over
        the queues it serves), and what its processors run (the workers hash)."""
        keys = self.keys
        async with self.client.pipeline(transaction=False) as pipe:
            for identity in identities:
                pipe.exists(keys.process(identity))
                pipe.hget(keys.beats, identity)
                pipe.hget(keys.last_beat, identity)
                pipe.hgetall(keys.workers(identity))
            replies = await pipe.execute(raise_on_error=False) if identities else []
        found: list[dict[str, Any]] = []
        for i, identity in enumerate(identities):
            alive, info, last, workers = replies[4 * i: 4 * i + 4]
            running = {}
            if isinstance(workers, dict):
                for jid, what in workers.items():
                    running[_text(jid)] = _json_object(what) or {}
            found.append({
                "identity": identity,
                "alive": not isinstance(alive, Exception) and int(alive) == 1,
                "info": None if isinstance(info, Exception) else _json_object(info),
                "last_beat": None if isinstance(last, Exception) else _float(last),
                "running": running,
            })
        counts = await self._in_progress([(e["identity"], e["info"]) for e in found])
        for entry, count in zip(found, counts, strict=True):
            entry["in_progress"] = count
        return found

    async def _in_progress(self, processes: Sequence[tuple[str, dict[str, Any] | None]]
                           ) -> list[int]:
        """Jobs on each process's in-progress lists: one per queue it serves (its beat
        says which), or per queue known when its beat does not say."""
        served = [_served(info) for _, info in processes]
        every = await self.set_queues() if any(s is None for s in served) else []
        lists = [(identity, queues if queues is not None else every)
                 for (identity, _), queues in zip(processes, served, strict=True)]
        async with self.client.pipeline(transaction=False) as pipe:
            for identity, queues in lists:
                for queue in queues:
                    pipe.llen(self.keys.in_progress(queue, identity))
            replies = iter(await pipe.execute(raise_on_error=False)
                           if any(queues for _, queues in lists) else [])
        counts = []
        for _, queues in lists:
            lengths = [next(replies) for _ in queues]
            counts.append(sum(int(n) for n in lengths if not isinstance(n, Exception)))
        return counts

    async def recoveries(self) -> list[dict[str, Any]]:
        """Recent recoveries of dead processes, newest first."""
        reply = await self.client.lrange(self.keys.recoveries, 0, RECOVERY_EVENTS_SHOWN - 1)
        return [event for event in map(_json_object, reply) if event is not None]

    # -- periodic ------------------------------------------------------------------------

    async def periodic_state(
        self, periodics: Sequence[tuple[str, str]]
    ) -> dict[str, tuple[float | None, bool]]:
        """For each ``(name, queue)``: name -> (last claimed tick, running now?). Both
        are kept in the slot of the queue the periodic job is enqueued on."""
        queues = sorted({queue for _, queue in periodics})
        async with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.hgetall(self.keys.cron_claimed(queue))
            for name, queue in periodics:
                pipe.exists(self.keys.periodic_running(queue, name))
            replies = await pipe.execute(raise_on_error=False) if periodics else []
        claimed = dict(zip(queues, replies[:len(queues)], strict=True))
        state = {}
        for (name, queue), busy in zip(periodics, replies[len(queues):], strict=True):
            ticks = claimed[queue] if isinstance(claimed[queue], dict) else {}
            state[name] = (_float(ticks.get(name.encode())),
                           not isinstance(busy, Exception) and int(busy) == 1)
        return state


def _served(info: dict[str, Any] | None) -> list[str] | None:
    """The queues a beat says its process serves (None: it does not say)."""
    queues = (info or {}).get("queues")
    if not isinstance(queues, list):
        return None
    valid = []
    for queue in queues:
        try:
            valid.append(check_queue_name(queue))
        except (TypeError, ValueError):
            continue
    return valid or None


def _queue_field(member: bytes) -> str | None:
    """A stored job's ``queue`` field if it names a queue (else None)."""
    try:
        payload = json.loads(member)
    except (ValueError, UnicodeDecodeError):
        return None
    try:
        return check_queue_name(payload.get("queue")) if isinstance(payload, dict) else None
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


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _float(value: Any) -> float | None:
    """A stored time as a finite float, or None (``nan``/``inf`` are no time)."""
    try:
        number = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return number if number is not None and math.isfinite(number) else None
