"""Jobs by jid, for the dashboard's job page, its Busy tab and ``cogworker-async job``:
what a job's status record says (``jobs/status.py``), cancelling it, and the progress of the
jobs processes run now.

    found = await insp.jobs.status(jid)        # JobStatus; state "unknown": no record
    outcome = await insp.jobs.cancel(jid)      # "cancelled", "stopping", "finished", "unknown"
    shown = await insp.jobs.running(processes) # (queue, jid) -> JobStatus, for Busy
    copy = await insp.jobs.copy(found)         # its stored payload (arguments), if any
    parents = await insp.jobs.waiting_for(found)  # a waiting job's parents, else None

Every read is bounded: a jid is looked for in each queue's slot (one HGETALL each, in
one round trip; never a scan), and the Busy tab's progress is one pipelined read of at
most ``MAX_RUNNING_READ`` records, however many jobs run.

A record holds no arguments (a job's payload is in one place at a time: its queue, a
process's in-progress list, its queue's schedule, retry or dead set, or, waiting for its
parents, its dep hash). ``copy`` looks for it in the one place the record's state names,
and only so far: the ends of a queue (``QUEUE_ENDS_READ`` each), the first
``IN_PROGRESS_READ`` of a process's list, a set's ZSCAN up to ``SEARCH_BUDGET`` entries
(a dep hash is one read). A job that moved between the two reads, or sits
beyond the look, is reported not found, with whether the look was complete. A
succeeded or cancelled job's payload is gone: there is nothing to find.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from cogworker_async.admin.records import JobRecord, ProcessInfo
from cogworker_async.admin.sets import SCAN_STEP, SEARCH_BUDGET
from cogworker_async.admin.waiting import WaitingFor, WaitingJobs, copy_of
from cogworker_async.jobs.status import CancelOutcome, JobStatus

if TYPE_CHECKING:
    from cogworker_async.admin.base import InspectorView

MAX_RUNNING_READ: Final = 200
"""Running jobs whose records the Busy tab reads (its first rows): a fleet running
thousands at once still costs one bounded read; the rest link to their job page."""
RUNNING_FIELDS: Final = ("state", "by", "progress", "info", "cancel")
"""What Busy shows of a running job's record: not its result or error, which a long
``info`` aside are what make a record large."""
QUEUE_ENDS_READ: Final = 200
"""Jobs read at each end of a queue (the newest, and the next to run) to find a queued
job's payload: at most 400 payloads a job page, however long the queue."""
IN_PROGRESS_READ: Final = 1000
"""Jobs of a process's in-progress list read to find a running job's payload (the list
is as long as its slots and prefetch: far less)."""

Place = Literal["queue", "in progress", "schedule", "retry", "dead", "waiting"]
PLACES: Final[dict[str, Place]] = {"queued": "queue", "running": "in progress",
                                   "scheduled": "schedule", "retrying": "retry",
                                   "dead": "dead", "waiting": "waiting"}
"""Where the payload of a job in each state is (a succeeded or cancelled job has none;
a waiting job's is its dep hash, ``admin/waiting.py``): a state left out here would
read as a job with no payload anywhere."""


@dataclass(frozen=True, slots=True)
class StoredCopy:
    """A job's payload as ``JobStatuses.copy`` found it, and where it looked."""

    record: JobRecord | None
    """The stored job (``score`` set when it is a set's entry); None: not found."""
    place: Place | None
    """Where it was looked for; None: nowhere (a finished job keeps no payload, or its
    record names no queue or process)."""
    complete: bool = True
    """Whether all of that place was looked at (False: a long queue's ends only, or a
    set's scan stopped at its budget)."""


class JobStatuses:
    """One App's jobs by jid (``Inspector.jobs``)."""

    def __init__(self, inspector: InspectorView) -> None:
        self._inspector = inspector

    async def status(self, jid: str, *, queue: str | None = None) -> JobStatus:
        """What the record of ``jid`` says (``App.status``); ValueError/TypeError for
        text that cannot be a jid."""
        return await self._inspector.app.status(jid, queue=queue)

    async def cancel(self, jid: str, *, queue: str | None = None) -> CancelOutcome:
        """Cancel ``jid`` (``App.cancel``: ``status.CancelOutcome`` says what each
        answer means)."""
        return await self._inspector.app.cancel(jid, queue=queue)

    async def waiting_for(self, status: JobStatus) -> WaitingFor | None:
        """The parents a waiting job waits for (``Inspector.waiting.of``); None for a
        job in another state, or one released or ended since ``status`` was read."""
        return await WaitingJobs(self._inspector).of(status)

    async def running(self, processes: Sequence[ProcessInfo]
                      ) -> dict[tuple[str, str], JobStatus]:
        """The records of the jobs live processes run, by ``(queue, jid)``: at most the
        first ``MAX_RUNNING_READ`` rows, and only those whose record says a process
        runs them (one that just ended is left out, not shown with stale progress)."""
        pairs = [(job.queue, job.jid) for process in processes if process.alive
                 for job in process.running if job.queue is not None][:MAX_RUNNING_READ]
        if not pairs:
            return {}
        found = await self._inspector.app._store().running_statuses(pairs, RUNNING_FIELDS)
        return {pair: status for pair, status in zip(pairs, found, strict=True)
                if status.state == "running"}

    async def copy(self, status: JobStatus) -> StoredCopy:
        """The stored payload of the job ``status`` describes (its arguments and all),
        looked for where its state says it is: a bounded look (the module says how)."""
        place, queue = PLACES.get(status.state), status.queue
        if place is None or queue is None:
            return StoredCopy(None, None)
        needle = b'"jid":' + json.dumps(status.jid).encode()  # as wire.encode writes it
        admin = self._inspector.admin()
        if place == "waiting":  # one hash, read whole: found, or released since
            dep = await admin.dep_record(queue, status.jid)
            return StoredCopy(copy_of(dep, queue) if dep is not None else None, place)
        if place == "queue":
            length, raws = await admin.queue_ends(queue, QUEUE_ENDS_READ)
            return StoredCopy(_holding(raws, status.jid, needle, queue), place,
                              complete=length <= 2 * QUEUE_ENDS_READ)
        if place == "in progress":
            if status.process is None:
                return StoredCopy(None, None)
            raws = await admin.in_progress_jobs(queue, status.process, IN_PROGRESS_READ)
            return StoredCopy(_holding(raws, status.jid, needle, queue), place,
                              complete=len(raws) < IN_PROGRESS_READ)
        return await self._in_set(place, queue, status.jid, needle)

    async def _in_set(self, target: Literal["schedule", "retry", "dead"], queue: str,
                      jid: str, needle: bytes) -> StoredCopy:
        """``jid``'s entry in ``queue``'s ``target`` set: ZSCAN MATCH steps, at most
        ``SEARCH_BUDGET`` entries looked at."""
        admin = self._inspector.admin()
        pattern = "*" + _glob_literal(needle.decode()) + "*"
        cursor, looked = 0, 0
        while True:
            cursor, matches = await admin.set_scan(target, queue, pattern, cursor, SCAN_STEP)
            for entry in matches:
                record = JobRecord.read(entry.member, score=entry.score, home=entry.queue)
                if record.jid == jid:
                    return StoredCopy(record, target)
            looked += SCAN_STEP
            if cursor == 0 or looked >= SEARCH_BUDGET:
                return StoredCopy(None, target, complete=cursor == 0)


def _holding(raws: Sequence[bytes], jid: str, needle: bytes, queue: str) -> JobRecord | None:
    """The first of ``raws`` that is the job ``jid`` (bytes holding ``needle`` decoded
    and checked: an argument may hold the same text)."""
    for raw in raws:
        if needle in raw:
            record = JobRecord.read(raw, home=queue)
            if record.jid == jid:
                return record
    return None


def _glob_literal(text: str) -> str:
    """``text`` as a MATCH pattern matching itself alone (a jid may hold ``*?[]``)."""
    return "".join("\\" + char if char in "*?[]\\^-" else char for char in text)

