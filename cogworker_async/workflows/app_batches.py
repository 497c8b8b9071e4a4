"""``jobs.batches``: an App's batches, from the caller's side — open one, read what it
has come to, collect its results, cancel it.

A namespace and nothing more: what a batch is and how its block adds members lives in
``workflows/batch.py``; this object only holds its App. ``App.batch``,
``App.batch_status``, ``App.batch_results`` and ``App.cancel_batch`` are the older
spellings of these methods (kept: every public name keeps working).
"""

from __future__ import annotations

from cogworker_async.errors import ConfigurationError
from cogworker_async.jobs.signature import Signature
from cogworker_async.workflows import batch
from cogworker_async.workflows.batch import Batch, BatchHost, BatchStatus


class AppBatches:
    """An App's batches (``jobs.batches``): ``open``, ``status``, ``results``, ``cancel``."""

    def __init__(self, app: BatchHost) -> None:
        self._app = app

    def open(self, description: str | None = None, *, on_success: Signature | None = None,
             on_complete: Signature | None = None, on_death: Signature | None = None,
             bid: str | None = None, parent: str | None = None,
             hold: float | None = None) -> Batch:
        """A batch: every job enqueued inside ``async with jobs.batches.open(...) as
        batch:`` joins it; once the block has exited, ``on_complete`` (every member
        ended), ``on_success`` (every member succeeded) and ``on_death`` (a member died)
        are enqueued, each once (signatures: ``report.s(*args)``). ``bid=`` opens again a
        batch not ended; ``parent=`` (or opening it inside a batch's job) makes it a
        child batch, which its parent waits for. ``hold``: outside a worker, seconds the
        block holds the batch without an add (``batch.HOLD``): killed, it is let go of."""
        if not self._app.settings.tracked:
            raise ConfigurationError("batches need job records: this App has "
                                     "track_jobs=False")
        return Batch(self._app, description=description, on_success=on_success,
                     on_complete=on_complete, on_death=on_death, bid=bid, parent=parent,
                     hold=hold)

    async def status(self, bid: str) -> BatchStatus:
        """What batch ``bid`` has come to: its state, counts, children, callbacks."""
        return await batch.status_of(self._app, bid)

    async def results(self, bid: str) -> dict[str, object]:
        """jid -> the result of each member of ``bid`` that succeeded and keeps one."""
        return await batch.results(self._app, bid)

    async def cancel(self, bid: str) -> int:
        """Cancel every member of batch ``bid`` not ended (child batches included);
        how many were cancelled or asked to stop."""
        return await batch.cancel(self._app, bid)
