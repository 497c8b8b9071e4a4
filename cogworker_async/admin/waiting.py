"""Jobs waiting for their parents (``options(after=[...])``): how many wait on a queue,
a page of them, and what one waits for — for the dashboard's Queues tab, queue pages and
job page, and for ``cogworker-async queues`` and ``job``.

    page = await insp.waiting.page("default")        # newest first, 25 a page
    found = await insp.waiting.of(status)            # its parents, pending or ended

A waiting job is in its queue's ``waiting`` zset until the step that releases or ends
it (``redis/dependencies.py``), and a cancel takes it out in its own step
(``lua/cancel.lua``); a page shows each entry's state from its record all the same,
so that an entry read between two steps is never taken for a job that will run. Every read
is bounded: a page of the zset (and its records, in one pipelined read), one job's
parents (at most ``definition.MAX_PARENTS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from cogworker_async.admin.records import PAGE_SIZE, JobRecord, Page, page_bounds
from cogworker_async.jobs.status import JobStatus
from cogworker_async.redis.admin_waiting import DepRecord
from cogworker_async.redis.dependencies import Parent
from cogworker_async.settings import check_queue_name

if TYPE_CHECKING:
    from cogworker_async.admin.base import InspectorView

RECORD_FIELDS: Final = ("state", "name", "enqueued_at", "cancel", "batch")
"""What a page of waiting jobs shows of each one's record."""
ON_PARENT_FAILURE: Final = {
    "cancel": "cancel: it is cancelled (and its own dependents with it)",
    "run": "run: it runs anyway, once every parent has ended",
    "dead": "dead: it is filed in dead (ParentFailed, naming the parent)",
}
"""What each ``on_parent_failure`` does when a parent dies or is cancelled, for a person
(the dashboard's job page, ``cogworker-async job``)."""
RESULT_PLACEHOLDER: Final = b"null"
"""Where a job that takes its parent's result has that argument, until the parent
succeeded: the payload shown is its two halves joined around this (as ``dep_apply.lua``
joins them around the result)."""


@dataclass(frozen=True, slots=True)
class ParentLink:
    """A parent of a waiting job: its queue, its jid, whether it has not ended yet."""

    queue: str
    jid: str
    pending: bool

    def as_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "jid": self.jid, "pending": self.pending}


@dataclass(frozen=True, slots=True)
class WaitingFor:
    """What a waiting job waits for, as its dep hash and pending set say."""

    parents: list[ParentLink]
    """In the order ``after=`` named them."""
    on_parent_failure: str
    """``cancel``, ``run`` or ``dead`` (``options(on_parent_failure=...)``)."""
    takes_result_of: ParentLink | None
    """The parent whose result becomes its first argument (``pass_result``)."""
    since: float | None

    @property
    def pending(self) -> int:
        return sum(1 for parent in self.parents if parent.pending)

    @property
    def policy_text(self) -> str:
        return ON_PARENT_FAILURE.get(self.on_parent_failure, self.on_parent_failure)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``cogworker-async job --json``)."""
        taken = self.takes_result_of
        return {"parents": [parent.as_dict() for parent in self.parents],
                "pending": self.pending, "on_parent_failure": self.on_parent_failure,
                "takes_result_of": taken.as_dict() if taken is not None else None,
                "since": self.since}


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """One entry of a queue's waiting jobs, with what its record says."""

    jid: str
    queue: str
    since: float
    pending: int
    """Parents it has not heard the end of."""
    status: JobStatus
    """Its record's ``RECORD_FIELDS`` (``unknown``: none, or it could not be read)."""

    def as_dict(self) -> dict[str, Any]:
        return {"jid": self.jid, "queue": self.queue, "since": self.since,
                "pending": self.pending, "state": self.status.state,
                "name": self.status.name}


def waiting_for(dep: DepRecord) -> WaitingFor:
    """A dep hash and pending set as what the job waits for."""
    links = {member: _link(member, member in dep.pending) for member in dep.parents}
    taken, taker = dep.takes_result_of, None
    if taken:
        taker = links.get(taken) or _link(taken, taken in dep.pending)
    return WaitingFor(parents=list(links.values()), on_parent_failure=dep.policy,
                      takes_result_of=taker, since=dep.created_at)


def copy_of(dep: DepRecord, queue: str) -> JobRecord:
    """The payload a waiting job will run with (its first argument ``null`` while it
    waits for the parent whose result it takes)."""
    raw = dep.raw + RESULT_PLACEHOLDER + dep.tail if dep.tail else dep.raw
    return JobRecord.read(raw, home=queue)


def _link(member: str, pending: bool) -> ParentLink:
    parent = Parent.of(member)
    return ParentLink(parent.queue, parent.jid, pending)


class WaitingJobs:
    """One App's jobs waiting for their parents (``Inspector.waiting``)."""

    def __init__(self, inspector: InspectorView) -> None:
        self._inspector = inspector

    async def count(self, queue: str) -> int:
        return (await self._inspector.admin().waiting_counts([check_queue_name(queue)]))[0]

    async def page(self, queue: str, number: int = 1, size: int = PAGE_SIZE
                   ) -> Page[WaitingJob]:
        """Page ``number`` of ``queue``'s waiting jobs, the newest first."""
        queue = check_queue_name(queue)
        start, stop, size = page_bounds(number, size)
        admin = self._inspector.admin()
        total = (await admin.waiting_counts([queue]))[0]
        entries = await admin.waiting_window(queue, start, stop)
        statuses = await admin.store.running_statuses(
            [(queue, entry.jid) for entry in entries], RECORD_FIELDS) if entries else []
        items = [WaitingJob(entry.jid, queue, entry.since, entry.pending, status)
                 for entry, status in zip(entries, statuses, strict=True)]
        return Page(items, number, size, total)

    async def of(self, status: JobStatus) -> WaitingFor | None:
        """What the job ``status`` describes waits for; None unless its record says it
        waits and its parents are still there to read (it may have been released or
        ended since its record was read)."""
        if status.state != "waiting" or status.queue is None:
            return None
        dep = await self._inspector.admin().dep_record(status.queue, status.jid)
        return waiting_for(dep) if dep is not None else None
