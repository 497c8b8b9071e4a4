"""Admin: the reads and the admin writes behind the dashboard and the admin CLI.

Only this module and ``store.py`` speak Redis. Every read is bounded — a page, a
window, one scan step — so that no view ever loads a whole queue or set, however
large. Every write that moves a job goes through the worker's own scripts (``promote``,
``move_member``): written before removed, and a member that another process moved or
ran meanwhile is skipped, never duplicated.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from typing import Any, Final

import redis
from redis.exceptions import ResponseError

from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import ConnectionLost, SetName, Store

log = logging.getLogger(__name__)

RECOVERY_EVENTS_SHOWN: Final = 50
MAXMEMORY_POLICY: Final = "maxmemory-policy"


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


class Admin:
    """Bounded reads and admin writes, on a Store's connection pool and key names."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.client = store.client
        self.keys = store.keys

    # -- totals and server -------------------------------------------------------------

    async def totals(self) -> tuple[int, int]:
        """(processed, failed) since the counters were created."""
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
        it): the views then say "n/a" rather than fail."""
        try:
            info = await self.client.info()
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
        }

    async def eviction_policy(self) -> str | None:
        """Redis' ``maxmemory-policy``, or None when it cannot be read.

        ``INFO memory`` first: ``CONFIG GET`` reads every setting (``requirepass``
        included), so a least-privilege user is not given it, and each refusal is an
        entry in the server's ACL LOG; asked only when INFO is refused or silent."""
        try:
            info = await self.client.info("memory")
        except ResponseError as exc:  # NOPERM, or renamed away
            log.debug("INFO memory refused: %s", exc)
        else:
            if info.get("maxmemory_policy"):
                return _text(info["maxmemory_policy"])
        try:
            reply = await self.client.config_get(MAXMEMORY_POLICY)
        except ResponseError as exc:
            log.debug("CONFIG GET %s refused: %s", MAXMEMORY_POLICY, exc)
            return None
        # keys and values are str or bytes, by redis-py version and protocol
        found = [v for k, v in reply.items() if k and _text(k) == MAXMEMORY_POLICY]
        return _text(found[0]) if found and found[0] else None

    async def now(self) -> float:
        """Redis' clock (epoch s): ages are judged by the clock the scripts use."""
        seconds, micros = await self.client.time()
        return float(seconds) + float(micros) / 1_000_000

    # -- queues ------------------------------------------------------------------------

    async def queue_names(self) -> list[str]:
        try:
            names = await self.client.smembers(self.keys.queues)
        except ResponseError as exc:  # a key of another type: shown empty, said once a call
            log.warning("the set of queue names is unreadable: %s", exc)
            return []
        return sorted(_text(name) for name in names)

    async def queue_heads(self, names: Sequence[str]) -> list[tuple[int, bytes | None]]:
        """(length, oldest job) of each queue, in one round trip. A key of the wrong
        type reads as empty rather than failing the whole page."""
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.llen(self.keys.queue(name))
                pipe.lindex(self.keys.queue(name), -1)
            replies = await pipe.execute(raise_on_error=False)
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

    async def queue_clear(self, name: str) -> int:
        """Delete a queue and forget its name; returns how many jobs it held."""
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.llen(self.keys.queue(name))
            pipe.unlink(self.keys.queue(name))  # freed in the background: a huge
            # list must not block Redis (and the beats) while it is deleted
            pipe.srem(self.keys.queues, name)
            length, _, _ = await pipe.execute()
        return int(length)

    # -- sorted sets: schedule, retry, dead ----------------------------------------------

    def zset(self, target: SetName) -> str:
        return self.store.zset_key(target)

    async def set_size(self, target: SetName) -> int:
        try:
            return int(await self.client.zcard(self.zset(target)))
        except ResponseError as exc:  # every page's header counts it: degrade, don't fail
            log.warning("the %s set is unreadable: %s", target, exc)
            return 0

    async def set_window(
        self, target: SetName, start: int, stop: int, *, newest_first: bool
    ) -> list[tuple[bytes, float]]:
        """Members ``start``..``stop`` by score (or newest first), with their scores."""
        key = self.zset(target)
        try:
            if newest_first:
                reply = await self.client.zrevrange(key, start, stop, withscores=True)
            else:
                reply = await self.client.zrange(key, start, stop, withscores=True)
        except ResponseError as exc:  # of another type: an empty page, not a 500
            log.warning("the %s set is unreadable: %s", target, exc)
            return []
        return [(as_bytes(member), float(score)) for member, score in _pairs(reply)]

    async def set_at_score(self, target: SetName, score: float, start: int,
                           count: int) -> list[bytes]:
        """Up to ``count`` members whose score is exactly ``score``, from the ``start``-th
        of them (how an entry is found again)."""
        reply = await self.client.zrangebyscore(self.zset(target), score, score,
                                                start=start, num=count)
        return [as_bytes(member) for member in reply if isinstance(member, bytes | str)]

    async def set_scan(
        self, target: SetName, pattern: str, cursor: int, count: int
    ) -> tuple[int, list[tuple[bytes, float]]]:
        """One ZSCAN step with a MATCH pattern: (next cursor, matches). Cursor 0 = done."""
        cursor, reply = await self.client.zscan(self.zset(target), cursor, match=pattern,
                                                count=count)
        return int(cursor), [(as_bytes(member), float(score)) for member, score in _pairs(reply)]

    async def set_contains(self, target: SetName, members: Sequence[bytes]) -> list[bool]:
        """Whether each member is (still) in the set."""
        if not members:
            return []
        # redis-py types the members as str; the stored bytes are what must match.
        scores = await self.client.zmscore(self.zset(target), list(members))  # type: ignore[arg-type]
        return [score is not None for score in scores]

    async def set_remove(self, target: SetName, members: Sequence[bytes]) -> list[bool]:
        """Remove members; whether each one was there (and so was removed by this call)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for member in members:
                pipe.zrem(self.zset(target), member)
            replies = await pipe.execute()
        return [int(reply) == 1 for reply in replies]

    async def take_unique(self, digest: str, jid: str, ttl: float) -> bool:
        """Take a unique lock for ``jid`` unless another jid holds it (``take_lock``)."""
        return await self.store.take_lock(self.keys.unique(digest), jid, ttl)

    async def release_unique(self, digest: str, jid: str) -> None:
        """Release a unique lock if ``jid`` still owns it (``release_lock``)."""
        await self.store.release_lock(self.keys.unique(digest), jid)

    async def set_clear(self, target: SetName) -> int:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.zcard(self.zset(target))
            pipe.unlink(self.zset(target))  # freed in the background (see queue_clear)
            size, _ = await pipe.execute()
        return int(size)

    async def set_to_queues(
        self, target: SetName, items: Sequence[tuple[bytes, bytes, str]]
    ) -> int:
        """Move ``(member, job to push, queue)`` items onto their queues (``promote``)."""
        return await self.store.promote(target, items)

    async def set_move(
        self, source: SetName, target: SetName, member: bytes, entry: bytes
    ) -> bool:
        """Move one member to another set, scored now (``move_member``)."""
        return await self.store.move_member(source, target, member, entry)

    # -- processes -----------------------------------------------------------------------

    async def identities(self) -> list[str]:
        """Every identity that has beaten or owns an in-progress list."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hkeys(self.keys.beats)
            pipe.smembers(self.keys.in_progress_identities)
            beaten, registered = await pipe.execute(raise_on_error=False)
        names: set[str] = set()
        for reply in (beaten, registered):
            if not isinstance(reply, Exception):
                names.update(_text(name) for name in reply)
        return sorted(names)

    async def processes(self, identities: Sequence[str]) -> list[dict[str, Any]]:
        """For each identity: alive?, its beat info, last beat, in-progress count, and
        what its processors run (the workers hash), in one round trip."""
        keys = self.keys
        async with self.client.pipeline(transaction=False) as pipe:
            for identity in identities:
                pipe.exists(keys.process(identity))
                pipe.hget(keys.beats, identity)
                pipe.hget(keys.last_beat, identity)
                pipe.llen(keys.in_progress(identity))
                pipe.hgetall(keys.workers(identity))
            replies = await pipe.execute(raise_on_error=False)
        found = []
        for i, identity in enumerate(identities):
            alive, info, last, length, workers = replies[5 * i: 5 * i + 5]
            running = {}
            if isinstance(workers, dict):
                for jid, what in workers.items():
                    running[_text(jid)] = _json_object(what) or {}
            found.append({
                "identity": identity,
                "alive": not isinstance(alive, Exception) and int(alive) == 1,
                "info": None if isinstance(info, Exception) else _json_object(info),
                "last_beat": None if isinstance(last, Exception) else _float(last),
                "in_progress": 0 if isinstance(length, Exception) else int(length),
                "running": running,
            })
        return found

    async def recoveries(self) -> list[dict[str, Any]]:
        """Recent recoveries of dead processes, newest first."""
        reply = await self.client.lrange(self.keys.recoveries, 0, RECOVERY_EVENTS_SHOWN - 1)
        return [event for event in map(_json_object, reply) if event is not None]

    # -- periodic ------------------------------------------------------------------------

    async def periodic_state(self, names: Sequence[str]) -> dict[str, tuple[float | None, bool]]:
        """name -> (last claimed tick, running now?)."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.cron_claimed)
            for name in names:
                pipe.exists(self.keys.periodic_running(name))
            claimed, *running = await pipe.execute(raise_on_error=False)
        ticks = claimed if isinstance(claimed, dict) else {}
        state = {}
        for name, busy in zip(names, running, strict=True):
            state[name] = (_float(ticks.get(name.encode())),
                           not isinstance(busy, Exception) and int(busy) == 1)
        return state


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
