"""Records: the Store's part for jobs' status records — reading them, cancelling,
progress, and the cancel sets a process polls. What a record holds is in ``status.py``;
how each move writes it, in ``lua/_record.lua``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import cast

from cogworker_async.job import jid_of
from cogworker_async.redis.errors import ResponseError
from cogworker_async.redis.part import Part, Shared
from cogworker_async.redis.queues import Queues
from cogworker_async.redis.scripts import Call
from cogworker_async.status import ALIVE, CANCELS_TTL, CancelOutcome, JobStatus, newest, read


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Records(Part):
    def __init__(self, shared: Shared, queues: Queues) -> None:
        super().__init__(shared)
        self.queues = queues

    async def job_status(self, jid: str, queues: Sequence[str] | None = None) -> JobStatus | None:
        """The status of ``jid``, from its record in one of ``queues`` (default: every
        registered queue; one HGETALL each, in one round trip per node — no scan of
        any queue or set); None when no queue has a record of it."""
        names = list(queues) if queues is not None else await self.queues.queue_names()
        if not names:
            return None
        async with self.client.pipeline(transaction=False) as pipe:
            for queue in names:
                pipe.hgetall(self.keys.record(queue, jid))
            replies = await pipe.execute(raise_on_error=False)
        found = [read(jid, reply, queue) for queue, reply in zip(names, replies, strict=True)
                 if isinstance(reply, dict) and reply]
        return newest(found)

    async def alive_in(self, jid: str, queues: Sequence[str] | None = None) -> list[str]:
        """The queues (of ``queues``, default every registered one) whose record of
        ``jid`` says it is queued, scheduled, running or retrying, or that hold a
        cancelled copy not dropped yet: where a chosen jid is still alive. One HMGET per
        queue, pipelined (one round trip per node)."""
        names = list(queues) if queues is not None else await self.queues.queue_names()
        if not names:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for queue in names:
                pipe.hmget(self.keys.record(queue, jid), ["state", "cancel"])
            replies = await pipe.execute(raise_on_error=False)
        return [queue for queue, reply in zip(names, replies, strict=True)
                if isinstance(reply, list) and len(reply) == 2 and (
                    reply[1] == b"1" or _text(reply[0] or b"") in ALIVE)]

    async def running_statuses(self, pairs: Sequence[tuple[str, str]],
                               fields: Sequence[str]) -> list[JobStatus]:
        """``fields`` of the records of ``(queue, jid)`` pairs, in one pipelined round trip
        per node; ``unknown`` where there is none (or it could not be read)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for queue, jid in pairs:
                pipe.hmget(self.keys.record(queue, jid), list(fields))
            replies = await pipe.execute(raise_on_error=False)
        found = []
        for (queue, jid), reply in zip(pairs, replies, strict=True):
            values = reply if isinstance(reply, list) else [None] * len(fields)
            found.append(read(jid, {name: value for name, value in zip(
                fields, values, strict=True) if value is not None}, queue))
        return found

    async def cancel_job(self, queue: str, jid: str) -> CancelOutcome:
        """Cancel ``jid`` of ``queue`` (``lua/cancel.lua`` says what each outcome means)."""
        keys = self.keys
        record = keys.record(queue, jid)
        names = [record]
        try:  # a unique job's lock, which the cancel releases (its record names it)
            lock = await self.client.hget(record, "lock")
        except ResponseError:  # not a record: cancel.lua says "unknown"
            lock = None
        if isinstance(lock, bytes | str) and _text(lock).startswith(keys.unique(queue, "")):
            names.append(_text(lock))
        reply = await self.scripts.run("cancel", names, [
            keys.cancels_prefix(queue), repr(time.time()), CANCELS_TTL,
            keys.finished_channel(jid), jid], durable=True)
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
