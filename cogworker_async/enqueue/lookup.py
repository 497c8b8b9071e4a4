"""Lookup: asking about a job by its jid — its status, its result, cancelling it.

    status = await jobs.status(jid)          # JobStatus: state, progress, result, error
    value = await jobs.result(jid, timeout=30)
    await jobs.cancel(jid)                   # "cancelled", "stopping", "finished", "unknown"

A jid names a job, not its queue, and records live in their queue's slot (Redis
Cluster: a hint in any other slot could not be written in the enqueue's own step). So a
lookup reads, in order: the queue named by ``queue=``; the queue this App enqueued the
jid on, if it did lately (``QueueHints``, in memory); else the record in every
registered queue's slot (one HGETALL each, in one round trip per node) — with at most
``MAX_QUEUES_LOOKED_IN`` queues registered: past that, a lookup without ``queue=`` of a
jid enqueued elsewhere is a ValueError saying so (a queue per tenant makes tens of
thousands, and one read each took most of a second per call). No queue or set is ever
scanned. ``result`` waits for the job's end on pub/sub
(jobs that keep a result publish it), on one subscription shared by all the waiters of
an event loop (``redis/waits.py``: a thousand waits hold one connection, not a
thousand), and looks at the record again at a growing interval whatever it hears, so a
lost message, a job that keeps no result or a broken subscription only makes it slower,
never wrong.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

from cogworker_async.errors import UNTRACKED, ConfigurationError, JobCancelled, JobFailed
from cogworker_async.jobs.status import CancelOutcome, JobStatus, check_jid, unknown
from cogworker_async.redis.store import Store

FIRST_LOOK: Final = 0.05
"""Seconds before ``result`` looks at the record again; doubled each time, up to
``LOOK_EVERY``."""
LOOK_EVERY: Final = 1.0
MAX_QUEUES_LOOKED_IN: Final = 1000
"""Registered queues a lookup without ``queue=`` reads a record in at most."""
HINTS_KEPT: Final = 100_000
"""Jids whose queue an App remembers from its own enqueues (the newest; ~200 bytes
each)."""


class QueueHints:
    """Jid -> the queue this App last enqueued it on, newest ``HINTS_KEPT`` only: a
    ``status``/``result`` right after an enqueue goes to the right queue's record at
    once. Only a hint: a record that is not there sends the lookup the long way (or,
    past ``MAX_QUEUES_LOOKED_IN`` queues, says ``unknown``)."""

    def __init__(self, kept: int = HINTS_KEPT) -> None:
        self._queues: OrderedDict[str, str] = OrderedDict()
        self._kept = kept

    def note(self, jid: str | None, queue: str) -> None:
        if jid is None:
            return
        self._queues[jid] = queue
        self._queues.move_to_end(jid)
        if len(self._queues) > self._kept:
            self._queues.popitem(last=False)

    def get(self, jid: str) -> str | None:
        return self._queues.get(jid)


class JobLookup:
    def __init__(self, store: Callable[[], Store], tracked: bool = True,
                 hints: QueueHints | None = None) -> None:
        self._store = store
        self._tracked = tracked
        self._hints = hints if hints is not None else QueueHints()

    def _check(self, jid: str) -> None:
        if not self._tracked:
            raise ConfigurationError(UNTRACKED)
        check_jid(jid)

    async def status(self, jid: str, *, queue: str | None = None) -> JobStatus:
        """What became of job ``jid`` (state ``unknown``: never enqueued here, or its
        record expired: ``Settings.keep_status``, or its ``keep_result``)."""
        self._check(jid)
        store = self._store()
        hinted = self._hints.get(jid) if queue is None else queue
        found = None if hinted is None else await store.job_status(jid, [hinted])
        if found is None and queue is None:
            names = await store.queue_names()
            if len(names) > MAX_QUEUES_LOOKED_IN and hinted is not None:
                return unknown(jid)  # enqueued there by this App, and gone (expired)
            if len(names) > MAX_QUEUES_LOOKED_IN:
                raise ValueError(
                    f"{len(names)} queues are registered: a lookup of job {jid!r} without "
                    f"queue= reads at most {MAX_QUEUES_LOOKED_IN} (one record each); pass "
                    "queue= (the queue it was enqueued on)")
            found = await store.job_status(jid, names)
        return found if found is not None else unknown(jid)

    async def cancel(self, jid: str, *, queue: str | None = None) -> CancelOutcome:
        """Cancel job ``jid`` wherever it is (``status.CancelOutcome`` says what each
        answer means). A cancel survives a crash of the process running the job."""
        found = await self.status(jid, queue=queue)
        if found.queue is None:
            return "unknown"
        return await self._store().cancel_job(found.queue, jid)

    async def result(self, jid: str, *, timeout: float | None = None,  # noqa: ASYNC109
                     queue: str | None = None) -> Any:
        """Wait for job ``jid`` to end and return its result (None for a job that keeps
        none). Raises ``JobFailed`` (dead), ``JobCancelled``, ``TimeoutError`` (still
        not ended after ``timeout`` seconds), ``LookupError`` (no such job: never
        enqueued, or its record expired)."""
        self._check(jid)
        if timeout is not None and (not isinstance(timeout, int | float)
                                    or isinstance(timeout, bool) or math.isnan(timeout)
                                    or timeout < 0):
            raise ValueError(f"timeout must be None or seconds >= 0, got {timeout!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        store = self._store()
        waits = store.finished_waits
        async with waits.watch(store.keys.finished_channel(jid)) as waiter:
            pause = FIRST_LOOK
            while True:
                async with waits.looks:
                    found = await self.status(jid, queue=queue)
                if found.state == "unknown":
                    raise LookupError(f"no job {jid!r}: never enqueued, or its record "
                                      "expired")
                if found.finished:
                    return outcome_of(found)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"job {jid} has not ended after {timeout}s "
                                       f"(it is {found.state})")
                await waiter.heard(pause if left is None else min(pause, left))
                pause = min(LOOK_EVERY, pause * 2)


def outcome_of(found: JobStatus) -> Any:
    """An ended job's ``result()``: its result, or JobCancelled/JobFailed."""
    if found.state == "succeeded":
        return found.result
    if found.state == "cancelled":
        raise JobCancelled(f"job {found.jid} was cancelled", found)
    raise JobFailed(f"job {found.jid} is dead: {found.error or 'no error recorded'}", found)
