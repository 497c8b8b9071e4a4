"""Ledger: what this process holds right now — the one owner of its in-flight state.

A job fetched onto this process's in-progress list is, from then on, in one of these
places until it leaves the list (in both for a moment, as a failed settle hands it on):
- ``running`` (raw -> Work): admitted by the dispatcher *before* a processor takes it,
  and left only once its outcome is settled or remembered in ``pending``;
- ``pending`` (raw -> Ack | Filing): it ran, but its outcome could not be written to
  Redis yet — settled late, never run again.

Reconcile trusts this memory, never Redis: a listed job in neither place is a stray (a
ghost of a lost fetch reply) and is requeued once seen on two passes in a row
(``strays``). Fencing asks the opposite question (``not_ours``): what this process
holds that is no longer on its list because another process recovered it.

Everything here is touched from the event loop, except ``snapshot``: the heartbeat
thread reads it. The lock is taken only by ``snapshot`` and by the two calls that change
``running`` (``admit``, ``finish``): uncontended, about 70 ns a call on CPython 3.11,
against the 70-110 µs of CPU a no-op job costs (``benchmarks/RESULTS.md``).
The rules are pinned by tests/unit/test_ledger.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Final

import anyio

from cogworker_async.worker.fetch import Work
from cogworker_async.worker.outcome import Ack, Filing

PENDING_PER_SLOT: Final = 10
"""Outcomes awaiting settlement per slot before fetching stops (back-pressure)."""

Pending = Ack | Filing
"""An outcome decided but not yet settled in Redis."""


class Slots:
    """Free processor slots, and a nudge that wakes the dispatcher."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self._nudge = anyio.Event()

    def fresh_nudge(self) -> anyio.Event:
        """An event set by the next nudge (take it *before* looking, to miss none)."""
        if self._nudge.is_set():
            self._nudge = anyio.Event()
        return self._nudge

    def nudge(self) -> None:
        self._nudge.set()

    def release(self) -> None:
        self.free += 1
        self._nudge.set()

    @property
    def idle(self) -> bool:
        return self.free == self.total


@dataclass(slots=True)
class NotOurs:
    """What fencing must undo: the runs to cancel, the outcomes to forget."""

    scopes: list[anyio.CancelScope] = field(default_factory=list)
    stale: list[bytes] = field(default_factory=list)


class Ledger:
    """``slots``: jobs held at once (processors, plus reliable fetch's prefetch);
    ``concurrency``: processors, which bound ``pending`` (``backpressure``)."""

    def __init__(self, slots: int, concurrency: int) -> None:
        self.slots = Slots(slots)
        self.running: dict[bytes, Work] = {}
        self.pending: dict[bytes, Pending] = {}
        self.scopes: dict[bytes, anyio.CancelScope] = {}
        """Cancel scopes of the jobs whose run is in progress (for fencing)."""
        self.fetching = False
        """A fetch is in flight: its jobs may be listed in Redis but not yet admitted,
        so a stray pass must not look. False while the dispatcher pauses after a failed
        fetch, so that strays are still requeued through a flapping link
        (tests/chaos/redisfaults/test_lost_replies.py::
        test_lost_fetch_reply_while_fetches_keep_failing)."""
        self._max_pending = concurrency * PENDING_PER_SLOT
        self._suspects: set[bytes] = set()
        """Strays seen on the last pass: requeued if seen again on the next."""
        self._lock = threading.Lock()

    # -- one job's way through a processor (the hot path: plain dict operations) ------

    def admit(self, work: Work) -> None:
        """Take a slot for ``work`` and count it running, before a processor takes it:
        a fetched job is never a stray."""
        self.slots.free -= 1
        self._lock.acquire()  # not ``with``: half the cost on Python 3.11, per job
        try:
            self.running[work.raw] = work
        finally:
            self._lock.release()

    def start(self, work: Work, scope: anyio.CancelScope) -> None:
        """Its run begins: cancellable through ``scope`` (fencing) until ``stop``."""
        self.scopes[work.raw] = scope

    def stop(self, work: Work) -> None:
        """Its run is over: nothing left to cancel (it is still running until settled)."""
        self.scopes.pop(work.raw, None)

    def finish(self, work: Work) -> None:
        """Its outcome is settled, or remembered in ``pending``: no longer running."""
        self._lock.acquire()
        try:
            self.running.pop(work.raw, None)
        finally:
            self._lock.release()

    # -- outcomes not yet settled in Redis ---------------------------------------------

    def remember(self, raw: bytes, disposition: Pending) -> None:
        """Settling failed: keep the outcome, to settle later (never to run again)."""
        self.pending[raw] = disposition

    def settled(self, raw: bytes) -> None:
        """Its remembered outcome is now in Redis (or was handed over)."""
        self.pending.pop(raw, None)

    def forget(self, raw: bytes) -> None:
        """Drop a remembered outcome unsettled: the job is no longer ours (fencing)."""
        self.pending.pop(raw, None)

    @property
    def backpressure(self) -> bool:
        """Too many outcomes not yet settled in Redis: fetch nothing until they are."""
        return len(self.pending) >= self._max_pending

    # -- what the list in Redis should hold ----------------------------------------------

    def in_flight(self) -> set[bytes]:
        """Every raw this process holds: running or pending (relisted after Redis lost
        this process's keys)."""
        return set(self.running) | set(self.pending)

    def strays(self, listed: list[bytes]) -> set[bytes]:
        """The listed jobs to requeue: neither running nor pending, on this pass and the
        one before (the second look rules out a job between its fetch and its admit).
        Each call is one pass."""
        running, pending = self.running, self.pending
        seen = {raw for raw in listed if raw not in running and raw not in pending}
        confirmed = seen & self._suspects
        self._suspects = seen - self._suspects
        return confirmed

    def not_ours(self, listed: set[bytes]) -> NotOurs:
        """What this process holds that is no longer on its list (another process
        recovered it while this one was paused)."""
        return NotOurs(
            scopes=[scope for raw, scope in self.scopes.items() if raw not in listed],
            stale=[raw for raw in self.pending if raw not in listed],
        )

    # -- read by the heartbeat thread ------------------------------------------------------

    def snapshot(self) -> list[Work]:
        """The running jobs, copied under the lock (safe from any thread)."""
        with self._lock:
            return list(self.running.values())

    @property
    def busy(self) -> int:
        """Jobs whose run is in progress."""
        return len(self.scopes)
