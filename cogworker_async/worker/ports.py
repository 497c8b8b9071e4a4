"""Ports: what the processor needs of its collaborators, as protocols.

The worker's own parts fit them (``Settler``, ``Ledger``, ``Observers``, ``Tally``,
``Canceller``, ``JobLocks``); so do the in-memory ones of ``cogworker_async.testing``
(its ``FakeWorker`` is a ``Settlement`` and an observer), with no cast. Each names only
the calls the processor makes: one it starts making is added here first, and mypy then
says which implementation lacks it.
"""

from __future__ import annotations

from typing import Protocol

import anyio

from cogworker_async.jobs.context import RunControl
from cogworker_async.jobs.wire import Payload
from cogworker_async.redis.limits import LimitStore
from cogworker_async.worker.canceller import CancelStore
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.locks import LockStore
from cogworker_async.worker.observers import RunReport
from cogworker_async.worker.outcome import Disposition


class Settlement(Protocol):
    """Applies a job's disposition (``settlement.Settler``); never raises."""

    async def settle(self, work: Work, disposition: Disposition) -> None: ...


class FreeSlots(Protocol):
    def release(self) -> None:
        """A processor slot is free again (``ledger.Slots``)."""


class InFlight(Protocol):
    """What this process holds (``ledger.Ledger``): a run's scope while it runs, and the
    job until it is settled or kept pending."""

    @property
    def slots(self) -> FreeSlots: ...

    def start(self, work: Work, scope: anyio.CancelScope) -> None: ...

    def stop(self, work: Work) -> None: ...

    def finish(self, work: Work) -> None: ...


class RunObservers(Protocol):
    """Who hears what each run came to (``observers.Observers``)."""

    def __bool__(self) -> bool:
        """Whether anyone listens (else no report is built)."""
        ...

    def finished(self, report: RunReport) -> None: ...


class RunTally(Protocol):
    """The run metrics (``run_metrics.Tally``)."""

    def add(self, name: str, *, ended_at: float, seconds: float, failed: bool) -> None: ...


class Cancels(Protocol):
    """The worker's side of cancels and progress (``canceller.Canceller``)."""

    @property
    def identity(self) -> str:
        """The process's identity (its limiters' slots are held in it)."""
        ...

    def start(self, control: RunControl) -> None: ...

    def finish(self, control: RunControl) -> None: ...


class RunLocks(Protocol):
    """The locks around a run (``locks.JobLocks``): unique and periodic."""

    async def before_run(self, payload: Payload) -> bool: ...

    async def never_started(self, payload: Payload) -> None: ...

    async def after_settle(self, payload: Payload, disposition: Disposition,
                           *, ran: bool) -> None: ...


class RunStore(LockStore, CancelStore, LimitStore, Protocol):
    """What a run needs of the Store: its locks, its cancels and progress, its limiters
    (the parts the processor builds on it: ``JobLocks``, ``Canceller``, the limiter's
    ``Runner``), and how often a job was recovered from a dead process (its context's
    ``orphan_count``). ``Store`` is one; so is ``testing``'s ``MemoryStore``."""

    async def orphan_count(self, queue: str, jid: str) -> int: ...
