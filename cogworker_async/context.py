"""The running job's context: what a job can know about itself.

    from cogworker_async import current_job

    @jobs.job()
    async def charge(order_id: int) -> None:
        job = current_job()
        if job.attempt > 1 or await job.was_recovered():
            ...  # check whether the charge already went through (idempotency)

Set by the processor for the duration of one run (also inside a plain function's
thread). Outside a job, ``current_job()`` raises ``LookupError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class JobContext:
    jid: str
    name: str
    """The registered name (the payload's ``class``)."""
    queue: str
    attempt: int
    """1 on the first run, 2 on the first retry, ..."""
    enqueued_at: float | None
    created_at: float | None
    payload: dict[str, Any] = field(repr=False)
    _orphanings: Callable[[], Awaitable[int]] = field(repr=False)

    async def was_recovered(self) -> bool:
        """True if this job was ever taken back from a process that died running it
        (so an earlier run may have done part of the work)."""
        return await self._orphanings() > 0


CURRENT: ContextVar[JobContext] = ContextVar("cogworker_current_job")
"""The running job's context: set by the worker around each run (``worker/execute.py``),
read by ``current_job()``."""


def current_job() -> JobContext:
    """The context of the job running in this task (or thread); LookupError outside one."""
    try:
        return CURRENT.get()
    except LookupError:
        raise LookupError("current_job() is only available while a job runs") from None


