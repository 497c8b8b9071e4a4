"""Records: the Store's part for jobs' status records — reading them, cancelling,
progress, and the cancel sets a process polls. What a record holds is in ``jobs/status.py``;
how each move writes it, in ``lua/_record.lua``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import cast

from cogworker_async.errors import WrongTypeKey
from cogworker_async.jobs.status import (
    ALIVE,
    CANCELS_TTL,
    LIVE_TTL,
    CancelOutcome,
    JobStatus,
    newest,
    read,
    unpack,
)
from cogworker_async.jobs.wire import jid_of
from cogworker_async.redis.errors import ResponseError
from cogworker_async.redis.part import Part, Shared
from cogworker_async.redis.queues import QueuesPart
from cogworker_async.redis.scripts import Call

_FOREIGN = re.compile(r"WRONGTYPE (cancel set|waiting set|arming set|unique lock) "
                      r"(.+?) is not a (\w+)")
"""How ``lua/cancel.lua`` refuses a key of another type (the key is not ours)."""

SWEEP_COUNT = 500
"""Live records looked at per step of a sweep (``recovery.SWEEP_EVERY``)."""


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Records(Part):
    def __init__(self, shared: Shared, queues: QueuesPart) -> None:
        super().__init__(shared)
        self.queues = queues

    async def _fields(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        """The fields of the records of ``(queue, jid)`` pairs, wherever each lives (its
        field of the queue's live hash, else its own key: ``lua/_record.lua``); ``{}``
        where there is none or it cannot be read. One pipelined round trip per node."""
        async with self.client.pipeline(transaction=False) as pipe:
            for queue, jid in pairs:
                pipe.hget(self.keys.live_records(queue), jid)
                pipe.get(self.keys.record(queue, jid))
            replies = await pipe.execute(raise_on_error=False)
        found: list[dict[str, str]] = []
        hashes: list[int] = []  # records earlier builds wrote: a hash at the key
        for index in range(len(pairs)):
            live, finished = replies[2 * index], replies[2 * index + 1]
            fields = unpack(live) if isinstance(live, bytes | str) else {}
            if not fields and isinstance(finished, bytes | str):
                fields = unpack(finished)
            elif not fields and isinstance(finished, ResponseError) and (
                    "WRONGTYPE" in str(finished)):
                hashes.append(index)
            found.append(fields)
        if hashes:
            async with self.client.pipeline(transaction=False) as pipe:
                for index in hashes:
                    pipe.hgetall(self.keys.record(*pairs[index]))
                flats = await pipe.execute(raise_on_error=False)
            for index, flat in zip(hashes, flats, strict=True):
                if isinstance(flat, dict):
                    found[index] = {_text(name): _text(value) for name, value in flat.items()}
        return found

    async def job_status(self, jid: str, queues: Sequence[str] | None = None) -> JobStatus | None:
        """The status of ``jid``, from its record in one of ``queues`` (default: every
        registered queue; an HGET and a GET each, in one round trip per node — no
        scan of any queue or set); None when no queue has a record of it."""
        names = list(queues) if queues is not None else await self.queues.queue_names()
        if not names:
            return None
        records = await self._fields([(queue, jid) for queue in names])
        return newest([read(jid, fields, queue)
                       for queue, fields in zip(names, records, strict=True) if fields])

    async def alive_in(self, jid: str, queues: Sequence[str] | None = None) -> list[str]:
        """The queues (of ``queues``, default every registered one) whose record of
        ``jid`` says it is queued, scheduled, running or retrying, or that hold a
        cancelled copy not dropped yet: where a chosen jid is still alive (one round
        trip per node)."""
        names = list(queues) if queues is not None else await self.queues.queue_names()
        if not names:
            return []
        records = await self._fields([(queue, jid) for queue in names])
        return [queue for queue, fields in zip(names, records, strict=True)
                if fields.get("cancel") == "1" or fields.get("state") in ALIVE]

    async def running_statuses(self, pairs: Sequence[tuple[str, str]],
                               fields: Sequence[str]) -> list[JobStatus]:
        """``fields`` of the records of ``(queue, jid)`` pairs, in one pipelined round trip
        per node; ``unknown`` where there is none (or it could not be read)."""
        wanted = set(fields)
        records = await self._fields(pairs)
        return [read(jid, {name: value for name, value in record.items() if name in wanted},
                     queue)
                for (queue, jid), record in zip(pairs, records, strict=True)]

    async def cancel_job(self, queue: str, jid: str) -> CancelOutcome:
        """Cancel ``jid`` of ``queue`` (``lua/cancel.lua`` says what each outcome means)."""
        keys = self.keys
        record = keys.record(queue, jid)
        names = [record]
        # A unique job's lock, which the cancel releases (its record names it).
        lock = (await self._fields([(queue, jid)]))[0].get("lock")
        if lock is not None and lock.startswith(keys.unique(queue, "")):
            names.append(lock)
        try:
            reply = await self.scripts.run("cancel", names, [
                keys.cancels_prefix(queue), repr(time.time()), CANCELS_TTL,
                keys.finished_channel(jid), jid, self.keep_status], durable=True,
                # a waiting job's copy and its entries, reached by name (lua/cancel.lua)
                declared=keys.dep_keys(queue, jid)[:2] + keys.dep_keys(queue, jid)[3:])
        except ResponseError as exc:
            refused = _FOREIGN.search(str(exc))
            if refused is None:
                raise
            what, key, kind = refused.groups()
            raise WrongTypeKey(f"cannot cancel job {jid}: its {what} {key} is not a {kind}: "
                               "not a key of cogworker's (a co-tenant's, or damaged): nothing "
                               "was written; delete the key, then cancel again",
                               key) from None
        return cast(CancelOutcome, _text(reply))

    async def close_records(self, removed: Sequence[tuple[str, bytes]]) -> None:
        """Say cancelled in the records of ``(queue, raw job)`` pairs someone removed by
        hand (``lua/close_record.lua``): best effort, the jobs are gone already."""
        if not self.track_jobs:
            return
        now = repr(time.time())
        for queue, raw in removed:
            jid = jid_of(raw)
            if jid is not None:
                await self.scripts.run("close_record", [self.keys.record(queue, jid)],
                                [now, self.keep_status])

    async def set_progress(self, identity: str,
                           updates: Sequence[tuple[str, str, float, bytes | None]]) -> None:
        """Write ``(queue, jid, fraction, info as JSON)`` progress of jobs this process
        runs, in one round trip per node (``lua/progress.lua``: only while the record
        says this process runs it)."""
        await self.scripts.pipelined([
            Call("progress", [self.keys.record(queue, jid)],
                 [identity, repr(float(fraction)), info or b""])
            for queue, jid, fraction, info in updates])

    async def take_cancels(self, identity: str, queues: Sequence[str]) -> list[tuple[str, str]]:
        """``(queue, jid)`` of the jobs this process is asked to cancel, taken off its
        cancel sets (one per queue, in the queue's slot)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.smembers(self.keys.cancels(queue, identity))
            replies = await pipe.execute(raise_on_error=False)
        asked = [(queue, _text(jid)) for queue, reply in zip(queues, replies, strict=True)
                 if isinstance(reply, set | list) for jid in reply]
        if asked:
            async with self.client.pipeline(transaction=False) as pipe:
                for queue, jid in asked:
                    pipe.srem(self.keys.cancels(queue, identity), jid)
                await pipe.execute(raise_on_error=False)
        return asked

    async def sweep_records(self, queue: str, cursor: str = "0",
                            count: int = SWEEP_COUNT) -> tuple[str, int]:
        """One step of the sweep of ``queue``'s live records (``lua/sweep_records.lua``):
        the next cursor ("0": a pass is done) and how many records were dropped (or
        closed: a watched job that vanished, its end noted for its watchers)."""
        reply = await self.scripts.run("sweep_records", [self.keys.live_records(queue)],
                                       [cursor, count, repr(time.time()), LIVE_TTL,
                                        self.keep_status])
        return _text(reply[0]), int(reply[1])
