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

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

T = TypeVar("T")

MAX_INFO_BYTES: Final = 64 * 1024

LIFESPAN_STATE: ContextVar[Any] = ContextVar("cogworker_lifespan_state", default=None)
"""What the worker's lifespan yielded (``worker/lifespan.py`` sets it while the lifespan
is entered; None without one), read by ``current_job().state``."""
"""Largest progress ``info`` (as JSON): it is written to Redis, over and over."""


@dataclass(slots=True, eq=False)
class RunControl:
    """What the worker and one run share while it runs: a cancel asked for it, and the
    progress it reported that is not written yet (``worker/canceller.py`` writes it,
    coalesced: a job calling ``set_progress`` in a tight loop costs one write per
    interval, not one per call)."""

    queue: str
    jid: str
    cancel_requested: bool = False
    unwritten: tuple[float, bytes | None] | None = None
    """The last progress reported and not written yet: fraction, info as JSON."""
    stop: Callable[[], None] | None = None
    """Cancels the run (an async job's scope); None for a plain function, which cannot
    be interrupted and reads ``cancel_requested`` instead."""

    def cancel(self) -> None:
        self.cancel_requested = True
        if self.stop is not None:
            self.stop()

    def report(self, fraction: float, info: Any = None) -> None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) \
                or not math.isfinite(fraction) or not 0 <= fraction <= 1:
            raise ValueError(f"progress must be a number from 0 to 1, got {fraction!r}")
        encoded = None
        if info is not None:
            try:
                encoded = json.dumps(info, separators=(",", ":"), allow_nan=False).encode()
            except (TypeError, ValueError) as exc:
                raise TypeError(f"progress info must be JSON: {exc}") from None
            if len(encoded) > MAX_INFO_BYTES:
                raise ValueError(f"progress info is {len(encoded)} bytes as JSON, over "
                                 f"{MAX_INFO_BYTES}")
        self.unwritten = (float(fraction), encoded)


NO_CONTROL: Final = RunControl("", "")
"""The control of a run nobody can cancel or watch (``track_jobs=False``, or a context
made outside a worker): shared, since what is written to it is never read."""


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
    _control: RunControl = field(default=NO_CONTROL, repr=False)

    @property
    def state(self) -> Any:
        """What the worker's lifespan yielded (``@jobs.lifespan``): the resources its jobs
        share, a pool or a client; None when the App has no lifespan."""
        return LIFESPAN_STATE.get()

    def state_as(self, kind: type[T]) -> T:
        """``state``, typed: a TypeError if the lifespan yielded something else (a typo
        in a test's fake state, a lifespan that yields a dict where a class is meant)."""
        found = LIFESPAN_STATE.get()
        if not isinstance(found, kind):
            raise TypeError(f"the lifespan's state is {type(found).__name__}, not "
                            f"{kind.__name__}")
        return found

    @property
    def cancel_requested(self) -> bool:
        """True once someone asked to cancel this job (``jobs.cancel(jid)``). An async
        job is cancelled anyway (``CancelledError``); a plain function cannot be, and
        checks this to stop itself (raise ``JobCancelled``, or return)."""
        return self._control.cancel_requested

    async def set_progress(self, fraction: float, info: Any = None) -> None:
        """Report how far the job is (0..1), with optional JSON ``info``: shown by
        ``status(jid)``, the dashboard and the CLI. Writes are coalesced: call it as
        often as you like."""
        self._control.report(fraction, info)

    def set_progress_sync(self, fraction: float, info: Any = None) -> None:
        """``set_progress`` for a plain (non-async) job function."""
        self._control.report(fraction, info)

    @property
    def batch_id(self) -> str | None:
        """The batch this job is a member of (``jobs.batch``); None: none. A callback
        job reads the batch it was called for here."""
        bid = self.payload.get("bid")
        return bid if isinstance(bid, str) else None

    async def was_recovered(self) -> bool:
        """True if this job was ever taken back from a process that died running it
        (so an earlier run may have done part of the work)."""
        return await self._orphanings() > 0


class OpenBatch(Protocol):
    """What an enqueue made inside ``async with jobs.batch(...)`` needs of it."""

    bid: str

    async def joining(self, jids: Sequence[str]) -> list[str]:
        """``jids`` join the batch: called before they are pushed; those that joined
        (a jid already a member does not join again)."""
        ...

    async def left(self, jids: Sequence[str]) -> None:
        """``jids``, which joined at this push, were never pushed (a duplicate refused):
        they leave it."""


BATCH: ContextVar[OpenBatch | None] = ContextVar("cogworker_open_batch", default=None)
"""The batch whose ``async with`` block the caller is in (``workflows/batch.py``): every enqueue
made there joins it."""

CURRENT: ContextVar[JobContext] = ContextVar("cogworker_current_job")
"""The running job's context: set by the worker around each run (``worker/execute.py``),
read by ``current_job()``."""


def current_job() -> JobContext:
    """The context of the job running in this task (or thread); LookupError outside one."""
    try:
        return CURRENT.get()
    except LookupError:
        raise LookupError("current_job() is only available while a job runs") from None


