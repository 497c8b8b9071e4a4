"""Jobs by jid, for the dashboard's job page, its Busy tab and ``cogworker-async job``:
what a job's status record says (``status.py``), cancelling it, and the progress of the
jobs processes run now.

    found = await insp.jobs.status(jid)        # JobStatus; state "unknown": no record
    outcome = await insp.jobs.cancel(jid)      # "cancelled", "stopping", "finished", "unknown"
    shown = await insp.jobs.running(processes) # (queue, jid) -> JobStatus, for Busy

Every read is bounded: a jid is looked for in each queue's slot (one HGETALL each, in
one round trip; never a scan), and the Busy tab's progress is one pipelined read of at
most ``MAX_RUNNING_READ`` records, however many jobs run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from cogworker_async.admin.records import ProcessInfo
from cogworker_async.status import CancelOutcome, JobStatus

if TYPE_CHECKING:
    from cogworker_async.admin.base import InspectorView

MAX_RUNNING_READ: Final = 200
"""Running jobs whose records the Busy tab reads (its first rows): a fleet running
thousands at once still costs one bounded read; the rest link to their job page."""
RUNNING_FIELDS: Final = ("state", "by", "progress", "info", "cancel")
"""What Busy shows of a running job's record: not its result or error, which a long
``info`` aside are what make a record large."""


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

    async def running(self, processes: Sequence[ProcessInfo]
                      ) -> dict[tuple[str, str], JobStatus]:
        """The records of the jobs live processes run, by ``(queue, jid)``: at most the
        first ``MAX_RUNNING_READ`` rows, and only those whose record says a process
        runs them (one that just ended is left out, not shown with stale progress)."""
        pairs = [(job.queue, job.jid) for process in processes if process.alive
                 for job in process.running if job.queue is not None][:MAX_RUNNING_READ]
        if not pairs:
            return {}
        found = await self._inspector.app.store().running_statuses(pairs, RUNNING_FIELDS)
        return {pair: status for pair, status in zip(pairs, found, strict=True)
                if status.state == "running"}

