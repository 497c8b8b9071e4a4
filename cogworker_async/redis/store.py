"""Store: the only object that issues Redis commands, in the words of the domain.

The worker and the client speak of raw jobs (``bytes``, exactly as stored), queues and
identities; this module turns that into keys and script calls. Every job operation names
its queue: the queue decides the hash slot of every key the move touches (``keys.py``).
On a single Redis, a fetch from several queues is one script call; on a cluster, one per
queue (their slots may be on different nodes). Raw jobs stay ``bytes``
end to end: a settle script finds a job on the in-progress list by exact value, and a
payload that is not valid UTF-8 must still be found (and filed in dead) byte for byte.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import anyio
import redis
import redis.asyncio
from redis.commands.core import AsyncScript

from cogworker_async import job as job_module
from cogworker_async import run_metrics
from cogworker_async.errors import ConfigurationError
from cogworker_async.redis import sentinel
from cogworker_async.redis.cluster import ClusterClient, ClusterLane, redirect_of
from cogworker_async.redis.connection import (
    ServerInfo,
    check_server,
    connect,
    is_cluster,
    maxmemory_policy,
)
from cogworker_async.redis.durability import Durability
from cogworker_async.redis.errors import (  # noqa: F401  (the names callers used to import from here)
    AuthenticationError,
    ClusterUnreachable,
    ConnectionLost,
    LostReply,
    NoMaster,
    RedisError,
    Unavailable,
)
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.lane import Lane
from cogworker_async.redis.liveness import HISTORY_TTL, Liveness, as_bytes
from cogworker_async.redis.pausing import Pausing
from cogworker_async.redis.records import Records
from cogworker_async.redis.scripts import SCRIPT_NAMES, source
from cogworker_async.redis.waits import FinishedWaits
from cogworker_async.settings import DEAD_MAX_AGE, DEAD_MAX_JOBS, KEEP_STATUS, Settings
from cogworker_async.status import LIVE_TTL, SUCCEEDED, Ended

log = logging.getLogger(__name__)

SetName = Literal["retry", "dead", "schedule"]


@dataclass(frozen=True, slots=True)
class StatsFlush:
    """One stats flush of a worker (``Store.flush_stats``): numbered, so that it can be
    sent again after a lost reply and still count once."""

    number: int
    processed: int
    failed: int
    runs: Mapping[int, Mapping[str, int]]
    """Run metrics: ``{minute: {field: increment}}`` (``run_metrics.Tally.take``)."""


@dataclass(frozen=True, slots=True)
class DeadLimits:
    """The dead set's bounds, applied by every script that files into it."""

    max_jobs: int = DEAD_MAX_JOBS
    max_age: float = DEAD_MAX_AGE


DEFAULT_DEAD_LIMITS: Final = DeadLimits()


def dead_limits_of(settings: Settings) -> DeadLimits:
    return DeadLimits(settings.dead_max_jobs, settings.dead_max_age)


def durability_of(settings: Settings) -> Durability | None:
    if settings.durability is None:
        return None
    return Durability(settings.durability, settings.durability_timeout)

RERUNS: Final = 4
"""Tries of a batch's redirected call, alone (``Store._rerun``)."""
RERUN_PAUSE: Final = 0.1
"""Seconds before the second try; the next ones wait 2, 3 times as long."""
REGISTER_EVERY: Final = 60.0
"""Seconds after which a Store registers a queue name again on its next enqueue."""
FLUSH_NUMBER_TTL: Final = 3600
"""Seconds a process's last applied stats flush number is kept: far longer than a
flush is ever retried (a worker retries its unconfirmed flush every second)."""

@dataclass(slots=True)
class Fetched:
    """What one fetch moved: ``(queue name, raw job)`` pairs, and unreadable queues."""

    jobs: list[tuple[str, bytes]] = field(default_factory=list)
    bad_queues: list[str] = field(default_factory=list)
    cancelled: list[tuple[str, str]] = field(default_factory=list)
    """``(queue, jid)`` of jobs dropped unrun: a cancel was waiting for them."""


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed run, as its status record keeps it (``file_failure``)."""

    jid: str
    error: str
    """``Class: message`` (``status.error_text``)."""
    attempt: int
    """A retry: the next run's number; dead: the last run's."""
    keep: float | None = None
    """Seconds a dead job's record is kept; None: the Store's ``keep_status``."""


_STATE_IN: Final[dict[str, str]] = {"dead": "dead", "retry": "retrying",
                                     "schedule": "scheduled"}
"""A job's state while it is in each set."""


def _jids_of(raws: Sequence[bytes]) -> list[str]:
    """The jids of jobs being pushed by a caller that did not say them (the client
    does): read from the payloads ("-" for one without)."""
    return [job_module.jid_of(raw) or "" for raw in raws]


def _name_of(raws: Sequence[bytes]) -> str:
    """The job name of the first of ``raws`` (for records of pushes that did not say it)."""
    for raw in raws[:1]:
        try:
            return str(job_module.decode(raw, job_module.NO_SIZE_LIMIT)["class"])
        except Exception:
            return ""
    return ""


async def _wake_messages(client: redis.asyncio.Redis,
                         pubsub: redis.asyncio.client.PubSub) -> AsyncIterator[None]:
    """One item per wake-up message on ``pubsub`` (subscribed already)."""
    if not sentinel.follows(client):
        async for message in pubsub.listen():
            if message.get("type") == "message":
                yield None
        return
    # Behind sentinels, a subscriber stays on a replaced master until Sentinel demotes
    # it (seconds, hearing no wake-up): looked at every FOLLOW_EVERY, and given up as a
    # lost connection once the master moved (the caller subscribes again).
    while True:
        message = await pubsub.get_message(timeout=sentinel.FOLLOW_EVERY)
        if message is not None and message.get("type") == "message":
            yield None
        if await sentinel.replaced(client, pubsub.connection):
            raise LostReply("the wake-up channel's node is no longer the master "
                            "(a Sentinel failover)")


def _as_list(reply: Any) -> list[Any]:
    return list(reply) if isinstance(reply, list | tuple) else []


def _wrong_type(error: Exception) -> bool:
    """A key of another type than the command's (a co-tenant's key, a hand's SET)."""
    return isinstance(error, redis.exceptions.ResponseError) and str(error).startswith(
        "WRONGTYPE")


class Store(Liveness, Records, Pausing):
    """Domain operations on one namespace, over one async connection pool. The
    operations on processes and their lists (recovery, hand-over, relist) are in
    ``liveness.py``, those on status records in ``records.py``, a queue's pause in
    ``pausing.py``, mixed in."""

    def __init__(self, client: redis.asyncio.Redis, keys: Keys,
                 dead_limits: DeadLimits = DEFAULT_DEAD_LIMITS,
                 durability: Durability | None = None,
                 keep_status: float = KEEP_STATUS, *, track_jobs: bool = True) -> None:
        self.client = client
        self.track_jobs = track_jobs
        """Keep a status record per job (``Settings.track_jobs``)."""
        self.keep_status = keep_status
        """Seconds a finished job's status record is kept (``Settings.keep_status``)."""
        self.keys = keys
        self.dead_limits = dead_limits
        self.durability = durability
        """What enqueues and settles wait for (``durability.py``); None: nothing."""
        self._durability_checked = False
        self.cluster = is_cluster(client)
        """Keys of different queues may live on different nodes: one script per slot."""
        self._wake_refused = False
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(source(name)) for name in SCRIPT_NAMES
        }
        self._lane: Lane | ClusterLane = (
            ClusterLane(client) if isinstance(client, ClusterClient) else Lane(client))
        self._registered: dict[str, float] = {}
        """Queue name -> when this Store last registered it (``time.monotonic``)."""
        self.finished_waits = FinishedWaits(client)
        """The one subscription ``result()``'s waiters share (``waits.py``)."""

    @classmethod
    def from_url(cls, url: str, namespace: str,
                 dead_limits: DeadLimits = DEFAULT_DEAD_LIMITS,
                 durability: Durability | None = None,
                 keep_status: float = KEEP_STATUS, *, track_jobs: bool = True) -> Store:
        return cls(connect(url), Keys(namespace), dead_limits, durability, keep_status,
                   track_jobs=track_jobs)

    def record_prefix(self, queue: str) -> str:
        """What scripts prefix jids with to name their records: "" (none written) when
        jobs are not tracked."""
        return self.keys.record_prefix(queue) if self.track_jobs else ""

    def _trim(self, target: SetName) -> list[str]:
        """The two trailing script arguments that bound the dead set when ``target`` is
        it (see ``lua/_dead.lua``); "0" otherwise."""
        if target != "dead":
            return ["0", "0"]
        return [str(self.dead_limits.max_jobs), repr(float(self.dead_limits.max_age))]

    async def aclose(self) -> None:
        await self.finished_waits.aclose()
        await self._lane.aclose()
        await self.client.aclose()

    async def eviction_policy(self) -> str | None:
        """Redis' ``maxmemory-policy``, or None when this user may not read it."""
        policy, _ = await maxmemory_policy(self.client)
        return policy

    async def check_server(self, *, reliable: bool) -> ServerInfo:
        info = await check_server(self.client, reliable=reliable)
        if self.durability is not None:  # a worker fails here, before it fetches a job
            await self._check_durability(self.durability)
        if self.durability is not None and self.durability.mode == "replica":
            await self._check_replicas()
        return info

    async def _check_replicas(self) -> None:
        """Warn once at start when ``durability="replica"`` cannot be met now: every
        enqueue and settle would fail until a replica connects."""
        try:
            replication = await self.client.info("replication")
        except RedisError:
            return  # not allowed to read it (ACL): the first WAIT will say
        if int(replication.get("connected_slaves", 0) or 0) < 1:
            log.warning("durability='replica', but the master has no replica connected: "
                        "enqueues and settles fail with NotDurable until one connects")

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[Any], *,
                   durable: bool = False) -> Any:
        """Run script ``name``; ``durable``: an enqueue or a settle, which waits for
        ``self.durability`` when there is one."""
        script = self._scripts[name]
        if durable and self.durability is not None:
            return await self._run_durably(name, keys, args, self.durability)
        try:
            return await self._lane.evalsha(script.sha, keys, args)
        except redis.exceptions.NoScriptError:
            # Nothing ran. EVAL caches the script on the node that serves these keys
            # (SCRIPT LOAD could go to another: on a cluster each node has its cache, and
            # a reshard or failover brings a node that never saw it).
            return await self._lane.call(b"EVAL", script.script, len(keys), *keys, *args)

    async def _run_durably(self, name: str, keys: Sequence[str], args: Sequence[Any],
                           durability: Durability) -> Any:
        """The script and ``WAIT``/``WAITAOF`` in one round trip, on one connection (a
        WAIT waits for its own connection's writes); ``NotDurable`` when not confirmed."""
        script = self._scripts[name]
        await self._check_durability(durability)
        reply, confirmed = await self._lane.call_many(
            [(b"EVALSHA", script.sha, len(keys), *keys, *args), durability.command])
        if isinstance(reply, redis.exceptions.NoScriptError):  # nothing ran: load it
            reply, confirmed = await self._lane.call_many(
                [(b"EVAL", script.script, len(keys), *keys, *args), durability.command])
        if isinstance(reply, Exception):
            raise reply
        durability.check(confirmed)
        return reply

    async def _check_durability(self, durability: Durability) -> None:
        """Before the first durable write: can this server confirm at all? A server
        without WAITAOF, or without its AOF on, would run every write and then refuse
        the confirmation — each enqueue raising as if its reply were lost, and its
        caller's retry pushing the job again. Asked once, with nothing written yet."""
        if self._durability_checked:
            return
        probe = durability.probe
        if probe is not None:
            try:
                await self._lane.call(*probe)
            except redis.exceptions.ResponseError as exc:
                raise ConfigurationError(durability.unusable(exc)) from None
        self._durability_checked = True

    # -- queue names -----------------------------------------------------------------

    async def register_queues(self, queues: Sequence[str]) -> bool:
        """Record queue names in the namespace's registry (the dashboard and recovery
        find each queue's slot through it). It is another slot than the queue's, so never
        in the enqueue script itself: written before the first push, so a queue with jobs
        is registered, then again every ``REGISTER_EVERY`` seconds at most (Redis may
        have lost the set: a restart without persistence, a failover). True if it sent."""
        now = time.monotonic()
        new = [queue for queue in dict.fromkeys(queues)
               if now - self._registered.get(queue, -REGISTER_EVERY) >= REGISTER_EVERY]
        if new:
            # Through the lane: it replaces a dead idle connection before sending (an
            # enqueue right after a Redis restart must not fail on the pool's).
            await self._lane.call(b"SADD", self.keys.queues, *new)
            self._registered.update(dict.fromkeys(new, now))
        return bool(new)

    async def queue_names(self) -> list[str]:
        """Every registered queue name, sorted (none when the registry is a key of
        another type: a co-tenant's, said each call)."""
        try:
            names = await self.client.smembers(self.keys.queues)
        except redis.exceptions.ResponseError as exc:
            if not _wrong_type(exc):
                raise
            log.warning("the set of queue names is unreadable: %s", exc)
            return []
        return sorted(as_bytes(name).decode("utf-8", "replace") for name in names)

    # -- enqueue ---------------------------------------------------------------------

    async def enqueue(self, queue: str, raws: Sequence[bytes], *,
                      jids: Sequence[str] | None = None, name: str | None = None,
                      chosen: bool = False) -> int:
        """Push jobs on ``queue`` (oldest first), each with its status record, and wake
        idle workers. ``jids`` and ``name`` are read from the jobs when not given.
        ``chosen``: the caller chose the jid; -1 (nothing pushed) while that jid is
        alive (``lua/enqueue.lua``). Returns the queue's length after the push."""
        await self.register_queues([queue])
        args = [queue, self.keys.wake_channel, self.record_prefix(queue), LIVE_TTL,
                repr(time.time()), name if name is not None else _name_of(raws),
                "1" if chosen else "0"]
        for jid, raw in zip(jids if jids is not None else _jids_of(raws), raws, strict=True):
            args += [jid, raw]
        reply = await self._run("enqueue", [self.keys.queue(queue)], args, durable=True)
        return int(self._woken(reply)[0])

    async def schedule(
        self, queue: str, raws: Sequence[bytes], *, at: float | None = None,
        delay: float | None = None, jids: Sequence[str] | None = None,
        name: str | None = None, chosen: bool = False,
    ) -> int:
        """Add jobs to ``queue``'s schedule, due at epoch ``at`` or ``delay`` s from
        Redis' clock, each with its status record (``enqueue``'s arguments); -1
        (nothing added) for a chosen jid that is alive."""
        await self.register_queues([queue])
        mode, value = ("at", at) if at is not None else ("in", delay or 0.0)
        now = repr(time.time())
        args: list[Any] = [mode, repr(float(value)), now, "0", "0",
                           self.record_prefix(queue), LIVE_TTL, "1" if chosen else "0",
                           queue, name if name is not None else _name_of(raws), now]
        for jid, raw in zip(jids if jids is not None else _jids_of(raws), raws, strict=True):
            args += [jid, raw]
        return int(await self._run("schedule", [self.keys.schedule(queue)], args,
                                   durable=True))

    # -- fetch and settle --------------------------------------------------------------

    async def fetch(self, identity: str, queues: Sequence[str], count: int,
                    limits: Mapping[str, int] | None = None) -> Fetched:
        """Move up to ``count`` jobs from ``queues`` (in order) onto this process's
        in-progress lists (one per queue), skipping paused queues, and taking from a
        queue in ``limits`` only while fewer than its limit run across all processes."""
        limits = limits or {}
        if not self.cluster or len(queues) == 1:
            return await self._fetch(identity, queues, count, limits)
        result = Fetched()
        failure: RedisError | None = None
        for queue in queues:  # each queue's slot on its own (maybe another node)
            try:
                some = await self._fetch(identity, [queue], count - len(result.jobs), limits)
            except RedisError as exc:
                # One shard away (down, failing over) must not stop the queues of the
                # others: tried in order all the same. Jobs moved are returned, as
                # fetch.lua returns them; with none, the failure is raised (and said).
                failure = failure or exc
                continue
            result.jobs += some.jobs
            result.bad_queues += some.bad_queues
            result.cancelled += some.cancelled
            if len(result.jobs) >= count:
                break
        if failure is not None and not result.jobs:
            raise failure
        return result

    async def _fetch(self, identity: str, queues: Sequence[str], count: int,
                     limits: Mapping[str, int]) -> Fetched:
        keys = [key for queue in queues
                for key in (self.keys.queue(queue), self.keys.in_progress(queue, identity))]
        args = [count, identity, repr(time.time()), self.keep_status, LIVE_TTL,
                *(self.record_prefix(queue) for queue in queues),
                *(self.keys.queue_prefix(queue) for queue in queues)]
        if limits:
            args += [limits.get(queue, 0) for queue in queues]
        reply = _as_list(await self._run("fetch", keys, args))
        flat = _as_list(reply[0]) if reply else []
        result = Fetched()
        for i in range(0, len(flat) - 1, 2):
            result.jobs.append((queues[int(flat[i]) - 1], bytes(flat[i + 1])))
        if len(reply) > 1:
            result.bad_queues = [queues[int(i) - 1] for i in _as_list(reply[1])]
        if len(reply) > 2:
            dropped = _as_list(reply[2])
            result.cancelled = [(queues[int(dropped[i]) - 1], as_bytes(dropped[i + 1]).decode(
                "utf-8", "replace")) for i in range(0, len(dropped) - 1, 2)]
        return result

    async def ack(self, identity: str, queue: str,
                  jobs: Sequence[tuple[bytes, str | None] | tuple[bytes, str | None, Ended]],
                  ) -> int:
        """Forget jobs of ``queue`` that ran (and clear their orphan counters); write how
        each ended in its status record (``Ended``: succeeded by default), its result
        with it."""
        keys = [self.keys.in_progress(queue, identity)]
        args: list[Any] = [repr(time.time())]
        for item in jobs:
            raw, jid = item[0], item[1]
            ended = item[2] if len(item) > 2 else SUCCEEDED
            orphanings = self.keys.orphanings(queue, jid or "-")
            recorded = jid is not None and (self.track_jobs or ended.keep is not None)
            # No record: the orphan counter's name holds the place (the script only
            # writes a record given a TTL).
            keys += [orphanings, self.keys.record(queue, jid) if jid and recorded else orphanings]
            keep = ended.keep if ended.keep is not None else self.keep_status
            args += [raw, ended.state, ended.result or b"", keep if recorded else "",
                     self.keys.finished_channel(jid) if ended.keep is not None and jid
                     else ""]
        return int(await self._run("ack", keys, args, durable=True))

    async def file_failure(
        self, identity: str, queue: str, raw: bytes, target: SetName, entry: bytes,
        delay: float, *, failure: Failure | None = None,
    ) -> bool:
        """File a failed job's ``entry`` in its queue's retry or dead set, then take
        ``raw`` off the list; ``failure`` (a readable job's) goes in its status record."""
        keys = [self.keys.in_progress(queue, identity), self.zset_key(queue, target)]
        args: list[Any] = [raw, entry, repr(float(delay)), repr(time.time()),
                           *self._trim(target)]
        if failure is not None and (self.track_jobs or failure.keep is not None):
            keys.append(self.keys.record(queue, failure.jid))
            dead = target == "dead"
            keep = failure.keep if failure.keep is not None else self.keep_status
            args += ["dead" if dead else "retrying", keep if dead else LIVE_TTL,
                     failure.error, failure.attempt,
                     self.keys.finished_channel(failure.jid)
                     if dead and failure.keep is not None else ""]
        return int(await self._run("file_failure", keys, args, durable=True)) == 1

    async def give_back(self, identity: str, queue: str, raw: bytes) -> bool:
        """Put a job that never started back at the front of its queue (or drop it, if a
        cancel waits for it)."""
        keys = [self.keys.in_progress(queue, identity), self.keys.queue(queue)]
        jid = job_module.jid_of(raw) if self.track_jobs else None
        if jid is not None:
            keys.append(self.keys.record(queue, jid))
        args = [raw, repr(time.time()), self.keep_status]
        return int(await self._run("give_back", keys, args, durable=True)) == 1

    # -- basic fetch (BRPOP: a crash loses the running jobs) -----------------------

    async def pop(self, queues: Sequence[str], block_for: float) -> tuple[str, bytes] | None:
        """BRPOP from ``queues`` (in order), blocking up to ``block_for`` seconds. On a
        cluster one BRPOP cannot span slots: each queue is tried without blocking, then
        the first is waited on."""
        if self.cluster and len(queues) > 1:
            for queue in queues:
                raw = await self.client.rpop(self.keys.queue(queue))
                if isinstance(raw, bytes | str):
                    return queue, as_bytes(raw)
            queues = queues[:1]
        reply = await self.client.brpop([self.keys.queue(q) for q in queues], timeout=block_for)
        if not reply:
            return None
        key, raw = reply
        return self.keys.queue_name_of(as_bytes(key).decode()), as_bytes(raw)

    async def push_back(self, queue: str, raw: bytes) -> None:
        await self.client.rpush(self.keys.queue(queue), raw)

    async def file_entry(self, queue: str, target: SetName, entry: bytes, delay: float) -> None:
        # No status record: a basic-fetch job is not followed past its enqueue.
        args = ["in", repr(float(delay)), repr(time.time()), *self._trim(target),
                "", 0, "0", queue, "", 0, "-", entry]
        await self._run("schedule", [self.zset_key(queue, target)], args, durable=True)

    # -- scheduled, retry and dead sets (one of each per queue) ------------------------

    def zset_key(self, queue: str, target: SetName) -> str:
        """The key of ``queue``'s ``schedule``, ``retry`` or ``dead`` set."""
        keys = self.keys
        return {"retry": keys.retry, "dead": keys.dead, "schedule": keys.schedule}[target](queue)

    async def due(self, queue: str, target: SetName, limit: int) -> list[bytes]:
        reply = await self._run("due", [self.zset_key(queue, target)],
                                [repr(time.time()), limit])
        return [bytes(m) for m in _as_list(reply)]

    async def promote(self, queue: str, target: SetName,
                      items: Sequence[tuple[bytes, bytes]]) -> int:
        """Move due ``(member, job)`` items from ``queue``'s ``target`` set onto it."""
        if not items:
            return 0
        keys = [self.zset_key(queue, target), self.keys.queue(queue)]
        args: list[Any] = [self.keys.wake_channel, queue, self.record_prefix(queue),
                           repr(time.time()), self.keep_status, LIVE_TTL,
                           "1" if target == "dead" else "0"]
        for member, job in items:
            args += [member, job]
        return int(await self._run("promote", keys, args))

    async def move_member(
        self, queue: str, source: SetName, target: SetName, member: bytes, entry: bytes,
        delay: float = 0.0,
    ) -> bool:
        """Move one entry between two of ``queue``'s sets (or within one: a new score)."""
        keys = [self.zset_key(queue, source), self.zset_key(queue, target)]
        args: list[Any] = [member, entry, repr(float(delay)), repr(time.time()),
                           *self._trim(target)]
        jid = job_module.jid_of(entry) if self.track_jobs else None
        if jid is not None:  # its record follows it
            keys.append(self.keys.record(queue, jid))
            args += [_STATE_IN[target], self.keep_status if target == "dead" else LIVE_TTL]
        return int(await self._run("move_member", keys, args)) == 1

    # -- stats and wake-ups ----------------------------------------------------------

    async def add_stats(self, processed: int, failed: int) -> None:
        """Add to the totals and to today's counts (UTC; kept ``HISTORY_TTL``). Not safe
        to repeat after a lost reply: a worker's flush uses ``flush_stats``."""
        day = time.strftime("%Y-%m-%d", time.gmtime())
        async with self.client.pipeline(transaction=False) as pipe:
            for count, total, daily in ((processed, self.keys.stats_processed,
                                         self.keys.stats_processed_on(day)),
                                        (failed, self.keys.stats_failed,
                                         self.keys.stats_failed_on(day))):
                if count:
                    pipe.incrby(total, count)
                    pipe.incrby(daily, count)
                    pipe.expire(daily, HISTORY_TTL)
            await pipe.execute()

    async def flush_stats(self, flusher: str, flush: StatsFlush) -> bool:
        """Apply one of ``flusher``'s stats flushes — totals, today's counts and the run
        metrics — at most once (``add_stats.lua``): after a lost reply, send the same
        flush again. False if it had been applied already. ``flusher`` names one run of
        one process (numbers start at 1 in each)."""
        keys = self.keys
        day = time.strftime("%Y-%m-%d", time.gmtime())
        names = [keys.stats_flushed(flusher), keys.stats_processed,
                 keys.stats_processed_on(day), keys.stats_failed, keys.stats_failed_on(day)]
        args: list[Any] = [flush.number, flush.processed, flush.failed, HISTORY_TTL,
                           run_metrics.RETENTION, FLUSH_NUMBER_TTL]
        for minute, fields in flush.runs.items():
            names.append(keys.run_metrics(minute))
            args.append(len(fields))
            for name, increment in fields.items():
                args += [name, increment]
        return int(await self._run("add_stats", names, args)) == 1

    async def run_metrics(self, minutes: Sequence[int]) -> list[dict[bytes, bytes]]:
        """The stored run metrics of each of ``minutes`` (an empty dict where none)."""
        if not minutes:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for minute in minutes:
                pipe.hgetall(self.keys.run_metrics(minute))
            replies = await pipe.execute(raise_on_error=False)
        for reply in replies:  # an outage is no empty minute: raised as it would be
            if isinstance(reply, Exception) and not _wrong_type(reply):
                raise reply
        # A minute's key of another type (a co-tenant's) reads as a minute without runs.
        return [dict(reply) if isinstance(reply, dict) else {} for reply in replies]

    @asynccontextmanager
    async def wake_ups(self) -> AsyncIterator[AsyncIterator[None]]:
        """Subscribe to the wake channel; iterate to wait for each enqueue's wake-up.
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
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def backlog(self, queues: Sequence[str]) -> tuple[int, list[str]]:
        """Jobs of ``queues`` waiting to run now: queued, plus due scheduled and retry
        entries (``run --burst`` stops when it is 0), and the names of those keys that
        hold another type (WRONGTYPE: nothing this worker can run is there, so they
        count 0). One pipeline; by Redis TIME."""
        seconds, micros = await self.client.time()
        now = repr(int(seconds) + int(micros) / 1_000_000)
        names = [name for queue in queues for name in (
            self.keys.queue(queue), self.keys.schedule(queue), self.keys.retry(queue))]
        async with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.llen(self.keys.queue(queue))
                pipe.zcount(self.keys.schedule(queue), "-inf", now)
                pipe.zcount(self.keys.retry(queue), "-inf", now)
            counts = await pipe.execute(raise_on_error=False)
        for count in counts:  # an outage is no empty queue: raised as it would be
            if isinstance(count, Exception) and not _wrong_type(count):
                raise count
        damaged = [name for name, count in zip(names, counts, strict=True)
                   if isinstance(count, Exception)]
        return sum(int(count) for count in counts if not isinstance(count, Exception)), damaged

    # -- locks and claims: unique jobs, periodic ticks, running locks ------------------

    async def enqueue_unique(
        self, digest: str, jid: str, ttl: float, queue: str, raw: bytes,
        *, at: float | None = None, delay: float | None = None, name: str | None = None,
        chosen: bool = False,
    ) -> bool:
        """Take the unique lock of ``digest`` for ``jid`` and push (or schedule) ``raw``
        in one step, with its status record; False if another jid holds the lock, or a
        ``chosen`` jid is alive (nothing written)."""
        keys = self.keys
        await self.register_queues([queue])
        mode, value, target = "now", 0.0, keys.queue(queue)
        if at is not None:
            mode, value, target = "at", at, keys.schedule(queue)
        elif delay is not None:
            mode, value, target = "in", delay, keys.schedule(queue)
        args = [jid, max(1, int(ttl * 1000)), mode, repr(float(value)), queue,
                keys.wake_channel, repr(time.time()), raw, LIVE_TTL,
                name if name is not None else _name_of([raw]), "1" if chosen else "0"]
        script_keys = [keys.unique(queue, digest), target]
        if self.track_jobs:
            script_keys.append(keys.record(queue, jid))
        reply = await self._run("enqueue_unique", script_keys, args, durable=True)
        return int(self._woken(reply)[0]) == 1

    async def push_batch(
        self, queue: str, raws: Sequence[bytes],
        unique: Sequence[tuple[str, str, float, bytes]] = (), *,
        jids: Sequence[str] | None = None, name: str | None = None,
    ) -> list[bool]:
        """Push ``raws`` on ``queue`` and each ``(digest, jid, ttl, raw)`` unique job, in
        one round trip; returns whether each unique job's lock was taken.

        Every call is in ``queue``'s slot, so a cluster sends them to one node too (and
        one ``WAIT`` after them covers them all, under ``durability``). A
        call refused with NOSCRIPT did not run: it is run again alone (``_run`` loads the
        script), and so is one a cluster redirected (its slot moved on in the middle of
        the batch); any other error is raised, as the script call's would be."""
        await self.register_queues([queue])
        calls = self._batch_calls(queue, raws, unique, jids, name)
        if not calls:
            return []
        if self.durability is not None:
            await self._check_durability(self.durability)
        commands: list[tuple[Any, ...]] = [
            (b"EVALSHA", self._scripts[name].sha, len(keys), *keys, *args)
            for name, keys, args in calls]
        if self.durability is not None:
            commands.append(self.durability.command)
        replies = await self._lane.call_many(commands)
        confirmed = replies.pop() if self.durability is not None else None
        results = []
        for (name, keys, args), reply in zip(calls, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError) or (
                    isinstance(reply, redis.exceptions.ResponseError)
                    and redirect_of(reply) is not None):
                # Did not run (not loaded; or the slot moved on, mid-batch): alone,
                # loaded and routed where the slot now is.
                reply = await self._rerun(name, keys, args)
            elif isinstance(reply, Exception):
                raise reply
            results.append(self._woken(reply)[0])
        if self.durability is not None:  # covers the calls that ran (a NOSCRIPT's rerun
            self.durability.check(confirmed)  # waited on its own connection)
        return [int(reply) == 1 for reply in results[1 if raws else 0:]]

    async def _rerun(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """A batch's call that did not run, run alone. A slot still migrating may
        redirect it past the lane's bound (MOVED, ASK, TRYAGAIN: it did not run either):
        tried again, a few times, on a map read afresh."""
        for attempt in range(1, RERUNS + 1):
            try:
                return await self._run(name, keys, args, durable=True)
            except redis.exceptions.ResponseError as exc:
                if redirect_of(exc) is None or attempt == RERUNS:
                    raise
                if isinstance(self.client, ClusterClient):
                    self.client.mark_stale()
                await anyio.sleep(RERUN_PAUSE * attempt)
        raise AssertionError("unreachable")

    def _batch_calls(
        self, queue: str, raws: Sequence[bytes], unique: Sequence[tuple[str, str, float, bytes]],
        jids: Sequence[str] | None, name: str | None,
    ) -> list[tuple[str, list[str], list[Any]]]:
        """``push_batch``'s script calls: one for the plain jobs, one per unique job."""
        calls: list[tuple[str, list[str], list[Any]]] = []
        now = repr(time.time())
        if name is None:
            name = _name_of([*raws, *(raw for *_, raw in unique)][:1])
        if raws:
            args: list[Any] = [queue, self.keys.wake_channel, self.record_prefix(queue),
                               LIVE_TTL, now, name, "0"]
            for jid, raw in zip(jids if jids is not None else _jids_of(raws), raws,
                                strict=True):
                args += [jid, raw]
            calls.append(("enqueue", [self.keys.queue(queue)], args))
        for digest, jid, ttl, raw in unique:
            calls.append(("enqueue_unique",
                          [self.keys.unique(queue, digest), self.keys.queue(queue),
                           *([self.keys.record(queue, jid)] if self.track_jobs else [])],
                          [jid, max(1, int(ttl * 1000)), "now", "0", queue,
                           self.keys.wake_channel, now, raw, LIVE_TTL, name, "0"]))
        return calls

    def _woken(self, reply: Any) -> list[Any]:
        """A push script's reply as a list, after reporting a wake-up that Redis refused
        (``lua/_wake.lua``): once per Store, since idle workers then find new jobs only
        at their fallback poll, ``idle_fetch_interval`` later, and nobody would know why."""
        items = _as_list(reply) or [reply]
        if len(items) > 1 and not self._wake_refused:
            self._wake_refused = True
            refusal = as_bytes(items[1]).decode("utf-8", "replace")
            log.warning("jobs are pushed, but Redis refused to publish the wake-up to idle "
                        "workers (%s): they find new jobs only at their fallback poll; "
                        "allow this user the channel %r", refusal, self.keys.wake_channel)
        return items

    async def release_lock(self, key: str, owner: str) -> bool:
        return int(await self._run("release_lock", [key], [owner])) == 1

    async def extend_lock(self, key: str, owner: str, ttl: float) -> bool:
        return int(await self._run("extend_lock", [key], [owner, max(1, int(ttl * 1000))])) == 1

    async def cron_claimed(self, queue: str) -> dict[str, float]:
        """periodic name -> last claimed tick, for the periodic jobs of ``queue``
        (unreadable stamps are left out)."""
        claimed = {}
        for name, value in (await self.client.hgetall(self.keys.cron_claimed(queue))).items():
            try:
                claimed[as_bytes(name).decode()] = float(value)
            except ValueError:
                continue
        return claimed

    async def cron_claim(self, name: str, tick: float, queue: str, raw: bytes) -> bool:
        await self.register_queues([queue])
        keys = [self.keys.cron_claimed(queue), self.keys.queue(queue)]
        jid = job_module.jid_of(raw) if self.track_jobs else None
        if jid is not None:
            keys.append(self.keys.record(queue, jid))
        args = [name, repr(tick), queue, self.keys.wake_channel, raw, LIVE_TTL,
                _name_of([raw]), repr(time.time())]
        return int(await self._run("cron_claim", keys, args, durable=True)) == 1
