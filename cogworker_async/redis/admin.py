"""Admin: the reads and the admin writes behind the dashboard and the admin CLI.

The tools' side of the Redis layer, as the Store (``store.py`` and its parts) is the
worker's and the client's: nothing outside ``redis/`` speaks Redis. Every read is
bounded — a page, a window, one scan step — so that no view ever loads a whole queue or
set, however large. Every write that moves a job goes through the worker's own scripts
(``promote``, ``move_member``): written before removed, and a member that another process
moved or ran meanwhile is skipped, never duplicated.

The schedule, retry and dead sets are one per queue, seen as one: their reads and
moves (``set_window``, ``locate``, ...) are in ``admin_sets.py``, mixed into ``Admin``.

No transaction here spans two slots (a cluster refuses them): each one is on one
queue's keys, and a write to the namespace's slot (the registry) is a command of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final

from redis.exceptions import NoPermissionError, ResponseError

from cogworker_async.jobs import stored
from cogworker_async.redis.admin_queues import QueueHead as QueueHead  # callers import it here
from cogworker_async.redis.admin_queues import QueueReads
from cogworker_async.redis.admin_sets import SetEntry as SetEntry  # callers import it here
from cogworker_async.redis.admin_sets import SetReads
from cogworker_async.redis.admin_waiting import WaitingReads
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.part import Via
from cogworker_async.redis.stats import HISTORY_TTL
from cogworker_async.redis.store import Store
from cogworker_async.settings import check_queue_name

log = logging.getLogger(__name__)

RECOVERY_EVENTS_SHOWN: Final = 50
MAXMEMORY_POLICY: Final = "maxmemory-policy"
DAY: Final = 24 * 3600


def _text(value: Any) -> str:
    return as_bytes(value).decode("utf-8", "replace")


def _json_object(raw: Any) -> dict[str, Any] | None:
    return stored.json_object(raw)  # damaged (too deep, not UTF-8...): None


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
    """Bounded reads and admin writes, on a Store's connection pool and key names; those
    on the schedule, retry and dead sets are its part ``sets`` (``admin_sets.py``), those
    of the jobs waiting for their parents its part ``waiting`` (``admin_waiting.py``).

    ``known_queues``: the App's own queues, whose sets are read even when the registry
    of names lacks them (Redis lost it, or a person cleared it)."""

    def __init__(self, store: Store, known_queues: Iterable[str] = ()) -> None:
        self.store = store
        self.client = store.client
        self.keys = store.keys
        self.known_queues = frozenset(known_queues)
        self.sets = SetReads(store, self.known_queues, self.queue_names)
        self.waiting = WaitingReads(store)
        self.lists = QueueReads(store)

    # -- the jobs waiting on a queue, of every priority (``admin_queues.py``) -----------

    queue_lists = Via("lists", QueueReads.queue_lists)
    queue_heads = Via("lists", QueueReads.queue_heads)
    groups_running = Via("lists", QueueReads.groups_running)
    queue_demand = Via("lists", QueueReads.queue_demand)
    queue_window = Via("lists", QueueReads.queue_window)
    queue_ends = Via("lists", QueueReads.queue_ends)
    queue_remove = Via("lists", QueueReads.queue_remove)
    queue_clear = Via("lists", QueueReads.queue_clear)

    # -- the schedule, retry and dead sets (``admin_sets.py``) --------------------------

    set_queues = Via("sets", SetReads.set_queues)
    zset = Via("sets", SetReads.zset)
    set_sizes = Via("sets", SetReads.set_sizes)
    set_size = Via("sets", SetReads.set_size)
    set_window = Via("sets", SetReads.set_window)
    set_at_score = Via("sets", SetReads.set_at_score)
    set_scan = Via("sets", SetReads.set_scan)
    locate = Via("sets", SetReads.locate)
    set_contains = Via("sets", SetReads.set_contains)
    set_remove = Via("sets", SetReads.set_remove)
    set_clear = Via("sets", SetReads.set_clear)
    set_to_queues = Via("sets", SetReads.set_to_queues)
    set_move = Via("sets", SetReads.set_move)

    # -- jobs waiting for their parents (``admin_waiting.py``) --------------------------

    waiting_counts = Via("waiting", WaitingReads.waiting_counts)
    waiting_window = Via("waiting", WaitingReads.waiting_window)
    dep_record = Via("waiting", WaitingReads.dep_record)

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
        """Start counting again: the totals and every kept day's counts, in one DEL.
        The days too, or the dashboard's "today" went on counting what the header's
        total no longer did (357 processed against "today: 714" after two demos)."""
        now = time.time()
        days = [time.strftime("%Y-%m-%d", time.gmtime(now - back * DAY))
                for back in range(HISTORY_TTL // DAY + 2)]  # a day's key outlives it by the TTL
        keys = [self.keys.stats_processed, self.keys.stats_failed]
        keys += [key for day in days
                 for key in (self.keys.stats_processed_on(day), self.keys.stats_failed_on(day))]
        await self.client.delete(*keys)  # one slot: the namespace's, on a cluster too

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
        # An empty member (a co-tenant's SADD) names nothing, not even a page to link to.
        return sorted(text for name in names if (text := _text(name)))

    async def in_progress_jobs(self, queue: str, identity: str, limit: int) -> list[bytes]:
        """The first ``limit`` jobs a process fetched from ``queue`` and has not settled
        (its in-progress list: as long as its slots and prefetch, but read bounded)."""
        try:
            reply = await self.client.lrange(self.keys.in_progress(queue, identity), 0,
                                             limit - 1)
        except ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                raise
            return []
        return [as_bytes(raw) for raw in reply]

    # -- unique locks (the sets' reads and moves: admin_sets.py) -----------------------

    async def take_unique(self, digest: str, jid: str, ttl: float, queue: str) -> bool:
        """Take ``queue``'s unique lock for ``jid`` unless another jid holds it."""
        return await self.store.take_lock(self.keys.unique(queue, digest), jid, ttl)

    async def release_unique(self, digest: str, jid: str, queue: str) -> None:
        """Release ``queue``'s unique lock if ``jid`` still owns it (``release_lock``)."""
        await self.store.release_lock(self.keys.unique(queue, digest), jid)

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

    async def live_beats(self) -> list[dict[str, Any] | None]:
        """The last beat of each live process (alive marker with a beat's TTL; None for a
        beat unreadable): what the unserved mark needs, and nothing of ``processes``'
        per-process reads (workers hash, in-progress lists) — a single queue's page reads
        it on every view."""
        identities = await self.identities()
        async with self.client.pipeline(transaction=False) as pipe:
            for identity in identities:
                pipe.pttl(self.keys.process(identity))
                pipe.hget(self.keys.beats, identity)
            replies = await pipe.execute(raise_on_error=False) if identities else []
        return [None if isinstance(info, Exception) else _json_object(info)
                for alive, info in zip(replies[::2], replies[1::2], strict=True)
                if not isinstance(alive, Exception) and int(alive) > 0]

    async def processes(self, identities: Sequence[str]) -> list[dict[str, Any]]:
        """For each identity: alive?, its beat info, last beat, in-progress count (over
        the queues it serves), and what its processors run (the workers hash)."""
        keys = self.keys
        async with self.client.pipeline(transaction=False) as pipe:
            for identity in identities:
                pipe.pttl(keys.process(identity))  # alive: with a beat's TTL
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
                "alive": not isinstance(alive, Exception) and int(alive) > 0,
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
        try:
            reply = await self.client.lrange(self.keys.recoveries, 0, RECOVERY_EVENTS_SHOWN - 1)
        except ResponseError as exc:  # a key of another type: none shown, said once a call
            if isinstance(exc, NoPermissionError):
                raise
            log.warning("the list of recoveries is unreadable: %s", exc)
            return []
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


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _float(value: Any) -> float | None:
    """A stored time as a finite float, or None (``nan``/``inf`` are no time)."""
    return stored.number(value)
