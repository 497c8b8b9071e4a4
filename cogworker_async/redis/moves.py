"""Moves: the scripts that take a job from one Redis structure to the next — enqueue,
schedule, fetch, settle (ack, file a failure, give back), promote what is due, move
between sets, claim a periodic tick — and the basic (BRPOP) fetch.

Every job operation names its queue: the queue decides the hash slot of every key the
move touches (``keys.py``). On a single Redis, a fetch from several queues is one script
call; on a cluster, one per queue (their slots may be on different nodes). Raw jobs stay
``bytes`` end to end: a settle script finds a job on the in-progress list by exact
value, and a payload that is not valid UTF-8 must still be found (and filed in dead)
byte for byte.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from cogworker_async.jobs import wire as job_module
from cogworker_async.jobs.priority import LEVELS, PRIORITY_AGING, aging_ms
from cogworker_async.jobs.status import LIVE_TTL, SUCCEEDED, Ended
from cogworker_async.redis.errors import RedisError
from cogworker_async.redis.part import Part, SetName, Shared, as_bytes, as_list
from cogworker_async.redis.queues import QueuesPart
from cogworker_async.redis.scripts import Call

log = logging.getLogger(__name__)

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


def _named_priority(raws: Sequence[bytes]) -> str:
    """``enqueue.lua``'s flag: "p" if a job may name a priority or a group (the script
    then reads each), "" if none does (a search in C here spares Redis a scan of every
    payload)."""
    return "p" if any(b'"priority":' in raw or b'"group":' in raw for raw in raws) else ""


def _name_of(raws: Sequence[bytes]) -> str:
    """The job name of the first of ``raws`` (for records of pushes that did not say it)."""
    for raw in raws[:1]:
        try:
            return str(job_module.decode(raw, job_module.NO_SIZE_LIMIT)["class"])
        except Exception:
            return ""
    return ""



class Moves(Part):
    def __init__(self, shared: Shared, queues: QueuesPart) -> None:
        super().__init__(shared)
        self.queues = queues
        self._wake_refused = False

    # -- enqueue ---------------------------------------------------------------------

    async def enqueue(self, queue: str, raws: Sequence[bytes], *,
                      jids: Sequence[str] | None = None, name: str | None = None,
                      chosen: bool | Literal["once"] = False, batch: str | None = None) -> int:
        """Push jobs on ``queue`` (oldest first), each with its status record, and wake
        idle workers. ``jids`` and ``name`` are read from the jobs when not given.
        ``chosen``: the caller chose the jid; -1 (nothing pushed) while that jid is
        alive (``lua/enqueue.lua``). Returns the queue's length after the push."""
        await self.queues.register_queues([queue])
        args = [queue, self.keys.wake_channel, self.record_prefix(queue), LIVE_TTL,
                repr(time.time()), name if name is not None else _name_of(raws),
                "2" if chosen == "once" else "1" if chosen else "0", batch or "",
                _named_priority(raws)]
        listed = list(jids if jids is not None else _jids_of(raws))
        for jid, raw in zip(listed, raws, strict=True):
            args += [jid, raw]
        # Once: each jid's marker, reached by name, declared for a cluster's routing.
        declared = [self.keys.once(queue, jid) for jid in listed] if chosen == "once" else []
        reply = await self.scripts.run("enqueue", [self.keys.queue(queue)], args, durable=True,
                                       declared=declared)
        return int(self._woken(reply)[0])

    async def keep_once(self, pushed: Sequence[tuple[str, str]], seconds: float) -> None:
        """Keep the once markers of ``(queue, jid)`` pairs enqueued ``chosen="once"`` only
        ``seconds`` more (an outbox row whose delete committed): long enough to refuse a
        push by a relay that read the row before that commit (a database without row
        locks), short so that the job leaves only its record (``keep_status``), not a
        marker for the records' 14 days. One EXPIRE per marker, pipelined (a round trip
        per node); a marker gone already stays gone."""
        if pushed:
            async with self.client.pipeline(transaction=False) as pipe:
                for queue, jid in pushed:
                    pipe.expire(self.keys.once(queue, jid), max(1, math.ceil(seconds)))
                await pipe.execute()

    async def schedule(
        self, queue: str, raws: Sequence[bytes], *, at: float | None = None,
        delay: float | None = None, jids: Sequence[str] | None = None,
        name: str | None = None, chosen: bool = False, batch: str | None = None,
    ) -> int:
        """Add jobs to ``queue``'s schedule, due at epoch ``at`` or ``delay`` s from
        Redis' clock, each with its status record (``enqueue``'s arguments); -1
        (nothing added) for a chosen jid that is alive."""
        await self.queues.register_queues([queue])
        mode, value = ("at", at) if at is not None else ("in", delay or 0.0)
        now = repr(time.time())
        args: list[Any] = [mode, repr(float(value)), now, "0", "0",
                           self.record_prefix(queue), LIVE_TTL, "1" if chosen else "0",
                           queue, name if name is not None else _name_of(raws), now,
                           batch or ""]
        for jid, raw in zip(jids if jids is not None else _jids_of(raws), raws, strict=True):
            args += [jid, raw]
        return int(await self.scripts.run("schedule", [self.keys.schedule(queue)], args,
                                   durable=True))

    # -- fetch and settle --------------------------------------------------------------

    async def fetch(self, identity: str, queues: Sequence[str], count: int,
                    limits: Mapping[str, int] | None = None,
                    aging: float | None = PRIORITY_AGING,
                    group_limits: Mapping[str, int] | None = None) -> Fetched:
        """Move up to ``count`` jobs from ``queues`` (in order) onto this process's
        in-progress lists (one per queue), skipping paused queues, and taking from a
        queue in ``limits`` only while fewer than its limit run across all processes.
        Within a queue, by priority: ``aging`` seconds of waiting are worth one level
        (None: a higher priority always first; ``jobs/priority.py``). A queue in
        ``group_limits`` takes no job of a fair group that many of run already."""
        limits, group_limits = limits or {}, group_limits or {}
        if not self.cluster or len(queues) == 1:
            return await self._fetch(identity, queues, count, limits, aging, group_limits)
        result = Fetched()
        failure: RedisError | None = None
        for queue in queues:  # each queue's slot on its own (maybe another node)
            try:
                some = await self._fetch(identity, [queue], count - len(result.jobs), limits,
                                         aging, group_limits)
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
                     limits: Mapping[str, int], aging: float | None,
                     group_limits: Mapping[str, int]) -> Fetched:
        keys = [key for queue in queues
                for key in (self.keys.queue(queue), self.keys.in_progress(queue, identity))]
        args = [count, identity, repr(time.time()), self.keep_status, LIVE_TTL, aging_ms(aging),
                *(self.record_prefix(queue) for queue in queues),
                *(self.keys.queue_prefix(queue) for queue in queues)]
        if limits or group_limits:
            args += [limits.get(queue, 0) for queue in queues]
            args += [group_limits.get(queue, 0) for queue in queues]
        reply = as_list(await self.scripts.run("fetch", keys, args))
        flat = as_list(reply[0]) if reply else []
        result = Fetched()
        for i in range(0, len(flat) - 1, 2):
            result.jobs.append((queues[int(flat[i]) - 1], bytes(flat[i + 1])))
        if len(reply) > 1:
            result.bad_queues = [queues[int(i) - 1] for i in as_list(reply[1])]
        if len(reply) > 2:
            dropped = as_list(reply[2])
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
        return int(await self.scripts.run("ack", keys, args, durable=True))

    async def file_failure(
        self, identity: str, queue: str, raw: bytes, target: SetName, entry: bytes,
        delay: float, *, failure: Failure | None = None,
    ) -> bool:
        """File a failed job's ``entry`` in its queue's retry or dead set, then take
        ``raw`` off the list; ``failure`` (a readable job's) goes in its status record."""
        keys = [self.keys.in_progress(queue, identity), self.zset_key(queue, target)]
        args: list[Any] = [raw, entry, repr(float(delay)), repr(time.time()),
                           *self.trim(target)]
        if failure is not None and (self.track_jobs or failure.keep is not None):
            keys.append(self.keys.record(queue, failure.jid))
            dead = target == "dead"
            keep = failure.keep if failure.keep is not None else self.keep_status
            args += ["dead" if dead else "retrying", keep if dead else LIVE_TTL,
                     failure.error, failure.attempt,
                     self.keys.finished_channel(failure.jid)
                     if dead and failure.keep is not None else ""]
        return int(await self.scripts.run("file_failure", keys, args, durable=True)) == 1

    async def give_back(self, identity: str, queue: str, raw: bytes) -> bool:
        """Put a job that never started back at the front of its queue (or drop it, if a
        cancel waits for it)."""
        keys = [self.keys.in_progress(queue, identity), self.keys.queue(queue)]
        jid = job_module.jid_of(raw) if self.track_jobs else None
        if jid is not None:
            keys.append(self.keys.record(queue, jid))
        args = [raw, repr(time.time()), self.keep_status]
        return int(await self.scripts.run("give_back", keys, args, durable=True)) == 1

    # -- basic fetch (BRPOP: a crash loses the running jobs) -----------------------

    async def pop(self, queues: Sequence[str], block_for: float) -> tuple[str, bytes] | None:
        """BRPOP from ``queues`` (in order), blocking up to ``block_for`` seconds. On a
        cluster one BRPOP cannot span slots: each queue is tried without blocking, then
        the first is waited on."""
        if self.cluster and len(queues) > 1:
            for queue in queues:
                for key in self._levels(queue):
                    popped = await self.client.rpop(key)
                    if isinstance(popped, bytes | str):
                        return queue, as_bytes(popped)
            queues = queues[:1]
        reply = await self.client.brpop([key for q in queues for key in self._levels(q)],
                                        timeout=block_for)
        if not reply:
            return None
        source, raw = reply
        return self.keys.queue_name_of(as_bytes(source).decode()), as_bytes(raw)

    def _levels(self, queue: str) -> list[str]:
        """``queue``'s lists, highest priority first: basic fetch serves priorities
        strictly (BRPOP takes from the first list that has a job), without aging."""
        return [self.keys.priority_level(queue, level) for level in LEVELS]

    async def push_back(self, queue: str, raw: bytes) -> None:
        priority = job_module.priority_of(raw)
        await self.client.rpush(self.keys.priority_level(queue, priority), raw)

    async def file_entry(self, queue: str, target: SetName, entry: bytes, delay: float) -> None:
        # No status record: a basic-fetch job is not followed past its enqueue.
        args = ["in", repr(float(delay)), repr(time.time()), *self.trim(target),
                "", 0, "0", queue, "", 0, "", "-", entry]
        await self.scripts.run("schedule", [self.zset_key(queue, target)], args, durable=True)

    async def due(self, queue: str, target: SetName, limit: int) -> list[bytes]:
        reply = await self.scripts.run("due", [self.zset_key(queue, target)],
                                [repr(time.time()), limit])
        return [bytes(m) for m in as_list(reply)]

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
        return int(await self.scripts.run("promote", keys, args))

    async def move_member(
        self, queue: str, source: SetName, target: SetName, member: bytes, entry: bytes,
        delay: float = 0.0,
    ) -> bool:
        """Move one entry between two of ``queue``'s sets (or within one: a new score)."""
        keys = [self.zset_key(queue, source), self.zset_key(queue, target)]
        args: list[Any] = [member, entry, repr(float(delay)), repr(time.time()),
                           *self.trim(target)]
        jid = job_module.jid_of(entry) if self.track_jobs else None
        if jid is not None:  # its record follows it
            keys.append(self.keys.record(queue, jid))
            args += [_STATE_IN[target], self.keep_status if target == "dead" else LIVE_TTL]
        return int(await self.scripts.run("move_member", keys, args)) == 1

    async def enqueue_unique(
        self, digest: str, jid: str, ttl: float, queue: str, raw: bytes,
        *, at: float | None = None, delay: float | None = None, name: str | None = None,
        chosen: bool = False, batch: str | None = None,
    ) -> bool:
        """Take the unique lock of ``digest`` for ``jid`` and push (or schedule) ``raw``
        in one step, with its status record; False if another jid holds the lock, or a
        ``chosen`` jid is alive (nothing written)."""
        keys = self.keys
        await self.queues.register_queues([queue])
        mode, value, target = "now", 0.0, keys.queue(queue)
        if at is not None:
            mode, value, target = "at", at, keys.schedule(queue)
        elif delay is not None:
            mode, value, target = "in", delay, keys.schedule(queue)
        args = [jid, max(1, int(ttl * 1000)), mode, repr(float(value)), queue,
                keys.wake_channel, repr(time.time()), raw, LIVE_TTL,
                name if name is not None else _name_of([raw]), "1" if chosen else "0",
                batch or ""]
        script_keys = [keys.unique(queue, digest), target]
        if self.track_jobs:
            script_keys.append(keys.record(queue, jid))
        reply = await self.scripts.run("enqueue_unique", script_keys, args, durable=True)
        return int(self._woken(reply)[0]) == 1

    async def push_batch(
        self, queue: str, raws: Sequence[bytes],
        unique: Sequence[tuple[str, str, float, bytes]] = (), *,
        jids: Sequence[str] | None = None, name: str | None = None,
        batch: str | None = None,
    ) -> list[bool]:
        """Push ``raws`` on ``queue`` and each ``(digest, jid, ttl, raw)`` unique job, in
        one round trip; returns whether each unique job's lock was taken.

        Every call is in ``queue``'s slot, so a cluster sends them to one node too (and
        one ``WAIT`` after them covers them all, under ``durability``): the runner's
        ``run_many``, which runs again alone a call that did not run."""
        await self.queues.register_queues([queue])
        calls = self._batch_calls(queue, raws, unique, jids, name, batch)
        if not calls:
            return []
        replies = await self.scripts.run_many(calls, durable=True)
        results = [self._woken(reply)[0] for reply in replies]
        return [int(reply) == 1 for reply in results[1 if raws else 0:]]

    def _batch_calls(
        self, queue: str, raws: Sequence[bytes], unique: Sequence[tuple[str, str, float, bytes]],
        jids: Sequence[str] | None, name: str | None, batch: str | None = None,
    ) -> list[Call]:
        """``push_batch``'s script calls: one for the plain jobs, one per unique job."""
        calls: list[Call] = []
        now = repr(time.time())
        if name is None:
            name = _name_of([*raws, *(raw for *_, raw in unique)][:1])
        if raws:
            args: list[Any] = [queue, self.keys.wake_channel, self.record_prefix(queue),
                               LIVE_TTL, now, name, "0", batch or "", _named_priority(raws)]
            for jid, raw in zip(jids if jids is not None else _jids_of(raws), raws,
                                strict=True):
                args += [jid, raw]
            calls.append(Call("enqueue", [self.keys.queue(queue)], args))
        for digest, jid, ttl, raw in unique:
            calls.append(Call("enqueue_unique",
                          [self.keys.unique(queue, digest), self.keys.queue(queue),
                           *([self.keys.record(queue, jid)] if self.track_jobs else [])],
                          [jid, max(1, int(ttl * 1000)), "now", "0", queue,
                           self.keys.wake_channel, now, raw, LIVE_TTL, name, "0",
                           batch or ""]))
        return calls

    def _woken(self, reply: Any) -> list[Any]:
        """A push script's reply as a list, after reporting a wake-up that Redis refused
        (``lua/_wake.lua``): once per Store, since idle workers then find new jobs only
        at their fallback poll, ``idle_fetch_interval`` later, and nobody would know why."""
        items = as_list(reply) or [reply]
        if len(items) > 1 and not self._wake_refused:
            self._wake_refused = True
            refusal = as_bytes(items[1]).decode("utf-8", "replace")
            log.warning("jobs are pushed, but Redis refused to publish the wake-up to idle "
                        "workers (%s): they find new jobs only at their fallback poll; "
                        "allow this user the channel %r", refusal, self.keys.wake_channel)
        return items

    async def cron_claim(self, name: str, tick: float, queue: str,
                         raw: bytes) -> tuple[bool, float | None]:
        """Claim and enqueue ``tick``: (whether this call did, the tick claimed before it,
        if any, so that the caller can say which ticks nobody claimed)."""
        await self.queues.register_queues([queue])
        keys = [self.keys.cron_claimed(queue), self.keys.queue(queue)]
        jid = job_module.jid_of(raw) if self.track_jobs else None
        if jid is not None:
            keys.append(self.keys.record(queue, jid))
        args = [name, repr(tick), queue, self.keys.wake_channel, raw, LIVE_TTL,
                _name_of([raw]), repr(time.time())]
        reply = as_list(await self.scripts.run("cron_claim", keys, args, durable=True))
        if not reply:
            return False, None
        before = as_bytes(reply[1])
        return True, float(before) if before else None
