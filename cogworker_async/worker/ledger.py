"""Ledger: what this process holds right now — the one owner of its in-flight state.

A job fetched onto this process's in-progress list is, from then on, in one of these
places until it leaves the list (in both for a moment, as a failed settle hands it on):
- ``running`` (raw -> Work): admitted by the dispatcher *before* a processor takes it,
  and left only once its outcome is settled or remembered in ``pending``;
- ``pending`` (raw -> Ack | Filing | GiveBack): its outcome could not be written to
  Redis yet — settled late, never run again.

Which of them need an entry on the list, should Redis lose it (``in_flight``, what
``Fence.relist`` lists again): a job not yet settled whose settle script needs the entry
(a run not decided yet, a Filing or a GiveBack) — never an Ack (``needless``: decided
before its script is sent, so a relist racing the ack cannot list a finished job, which
reconcile would then requeue as a stray), never a job whose settle script is on its way
(``settling``: relists and such settles exclude each other, ``relisting``), never one
whose last settle lost its reply (``unsure``: it may be filed already), never one that
fencing found recovered elsewhere (``disowned``). A settle that finds its job missing
asks for a relist (``want_relist``); so does a reconcile pass that finds an entry missing
on two passes in a row (``strays``), in case the beat's FORGOTTEN reply was lost.

Those marks are the ledger's own: others read them (read-only views) and report what
happened through its transitions, which keep the rules here — ``acked`` and
``left_list`` (needless), ``settle_began``/``settle_ended`` (settling), ``reply_lost``
(unsure), ``disown``, ``fetch_began``/``fetch_ended`` (``fetching``),
``relist_began``/``relist_failed`` (``relist_wanted``), ``on_relist_wanted`` and
``follow_beats`` (the fence's wake-up and the heartbeat's count, wired once).

Reconcile trusts this memory, never Redis: a listed job in neither place is a stray (a
ghost of a lost fetch reply) and is requeued once seen on two passes in a row
(``strays``). Fencing asks the opposite question (``not_ours``): what this process
holds that is no longer on its list because another process recovered it.

Everything here is touched from the event loop, except ``snapshot``: the heartbeat
thread reads it. The lock is taken only by ``snapshot`` and by the two calls that change
``running`` (``admit``, ``finish``): uncontended, about 70 ns a call on CPython 3.11,
against the 70-110 µs of CPU a no-op job costs (``benchmarks/RESULTS.md``).
The rules are pinned by tests/worker/units/test_ledger.py.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Collection
from collections.abc import Set as AbstractSet
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final

import anyio

from cogworker_async.worker.fetch import Work
from cogworker_async.worker.outcome import Ack, Filing, GiveBack

PENDING_PER_SLOT: Final = 10
"""Outcomes awaiting settlement per slot before fetching stops (back-pressure)."""

Pending = Ack | Filing | GiveBack
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
    unlisted: list[bytes] = field(default_factory=list)
    """Running here but not listed: their settles must not relist them."""


class Ledger:
    """``slots``: jobs held at once (processors, plus reliable fetch's prefetch);
    ``concurrency``: processors, which bound ``pending`` (``backpressure``)."""

    def __init__(self, slots: int, concurrency: int) -> None:
        self.slots = Slots(slots)
        self.running: dict[bytes, Work] = {}
        self.pending: dict[bytes, Pending] = {}
        self.finished = 0
        """Jobs this process has run (or could not run) and settled or kept pending,
        since it started."""
        self.admitted = 0
        """Jobs this process has fetched to run since it started (``max_jobs``)."""
        self.scopes: dict[bytes, anyio.CancelScope] = {}
        """Cancel scopes of the jobs whose run is in progress (for fencing)."""
        self._fetching = False
        """A fetch is in flight: its jobs may be listed in Redis but not yet admitted,
        so a stray pass must not look. False while the dispatcher pauses after a failed
        fetch, so that strays are still requeued through a flapping link
        (tests/worker/chaos/redisfaults/test_lost_replies.py::
        test_lost_fetch_reply_while_fetches_keep_failing)."""
        self._max_pending = concurrency * PENDING_PER_SLOT
        self._suspects: set[bytes] = set()
        """Strays seen on the last pass: requeued if seen again on the next."""
        self._missing: set[bytes] = set()
        """In-flight jobs missing from the list on the last pass: relisted if again."""
        self._needless: set[bytes] = set()
        """Need no list entry: acked (from the decision on), or settled while running."""
        self._settling: set[bytes] = set()
        """Their Filing or GiveBack script is on its way (not relisted meanwhile)."""
        self._unsure: set[bytes] = set()
        """A settle of theirs lost its reply: it may have run (a 0 then means settled)."""
        self._disowned: set[bytes] = set()
        """Found recovered elsewhere by fencing: never relisted, their settle dropped."""
        self.queues: dict[bytes, str] = {}
        """The queue of each pending outcome (the queue's slot holds its list entry)."""
        self.doubtful: dict[bytes, tuple[Pending, str, int]] = {}
        """Settles that found their job missing after an attempt lost its reply, with
        the number of beats begun by then (``follow_beats``): settled by that attempt if a beat
        begun later says ALIVE (``beat_alive``), not if one says Redis lost the keys
        (``keys_lost``: settled again, after a relist)."""
        self._beats: Callable[[], int] = lambda: 0
        """How many beats the heartbeat has begun (read from any thread)."""
        self._relist_wanted = False
        self._on_relist: Callable[[], None] = lambda: None
        """Called on ``want_relist`` (the fence's wake-up)."""
        self._relisting: anyio.Event | None = None
        self._lock = threading.Lock()

    # -- one job's way through a processor (the hot path: plain dict operations) ------

    def admit(self, work: Work) -> None:
        """Take a slot for ``work`` and count it running, before a processor takes it:
        a fetched job is never a stray."""
        self.slots.free -= 1
        self.admitted += 1
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
        raw = work.raw
        self.finished += 1
        self._lock.acquire()
        try:
            self.running.pop(raw, None)
        finally:
            self._lock.release()
        self._needless.discard(raw)
        if raw not in self.pending:
            self._unsure.discard(raw)
            self._disowned.discard(raw)

    # -- outcomes not yet settled in Redis ---------------------------------------------

    def queue_of(self, raw: bytes) -> str:
        """The queue ``raw`` was fetched from: its list, retry and dead sets are there."""
        work = self.running.get(raw)
        return work.queue if work is not None else self.queues.get(raw, "")

    def in_flight_by_queue(self) -> dict[str, list[bytes]]:
        """``in_flight``, grouped by the queue each was fetched from."""
        grouped: dict[str, list[bytes]] = {}
        for raw in self.in_flight():
            grouped.setdefault(self.queue_of(raw), []).append(raw)
        return grouped

    def remember(self, raw: bytes, disposition: Pending, *, queue: str = "") -> None:
        """Settling failed: keep the outcome, to settle later (never to run again);
        ``queue``: the queue it was fetched from."""
        queue = queue or self.queue_of(raw)
        self.pending[raw] = disposition
        if queue:
            self.queues[raw] = queue

    def settled(self, raw: bytes) -> None:
        """Its remembered outcome is now in Redis (or was handed over)."""
        self.pending.pop(raw, None)
        self._drop_marks(raw)

    def forget(self, raw: bytes) -> None:
        """Drop a remembered outcome unsettled: the job is no longer ours (fencing)."""
        self.pending.pop(raw, None)
        self._drop_marks(raw)

    def _drop_marks(self, raw: bytes) -> None:
        self.queues.pop(raw, None)
        if raw not in self.running:
            self._needless.discard(raw)
            self._unsure.discard(raw)
            self._disowned.discard(raw)

    @property
    def backpressure(self) -> bool:
        """Too many outcomes not yet settled in Redis: fetch nothing until they are."""
        return len(self.pending) >= self._max_pending

    # -- what a settle tells of a job's list entry (the marks ``in_flight`` skips) ------

    def acked(self, raw: bytes) -> None:
        """Its Ack is decided (before its script is sent): it needs no list entry from
        now on, so a relist racing the ack never lists a finished job."""
        self._needless.add(raw)

    def settle_began(self, raw: bytes) -> None:
        """Its Filing or GiveBack script is on its way (it took its ``settle_turn``): not
        relisted meanwhile, since the script removes the entry."""
        self._settling.add(raw)

    def settle_ended(self, raw: bytes) -> None:
        """That script is over (replied, failed or cancelled)."""
        self._settling.discard(raw)

    def left_list(self, raw: bytes) -> None:
        """Its settle is over and its entry is gone (removed by the script; or found
        missing, and not to be put back: disowned, or in doubt): never relisted."""
        self._needless.add(raw)

    def reply_lost(self, raw: bytes) -> None:
        """A settle of it lost its reply (``maybe_ran``): it may have run, so a 0 from
        a later try is no sign of a lost list."""
        self._unsure.add(raw)

    @property
    def needless(self) -> AbstractSet[bytes]:
        """Read-only: acked, or off the list after its settle (``acked``, ``left_list``)."""
        return self._needless

    @property
    def settling(self) -> AbstractSet[bytes]:
        """Read-only: their settle script is on its way (``settle_began``)."""
        return self._settling

    @property
    def unsure(self) -> AbstractSet[bytes]:
        """Read-only: a settle of theirs lost its reply (``reply_lost``)."""
        return self._unsure

    @property
    def disowned(self) -> AbstractSet[bytes]:
        """Read-only: found recovered elsewhere by fencing (``disown``)."""
        return self._disowned

    # -- the dispatcher's fetches ------------------------------------------------------

    def fetch_began(self) -> None:
        """A fetch is sent: its jobs may be listed before they are admitted."""
        self._fetching = True

    def fetch_ended(self) -> None:
        """The fetch replied, or failed: its jobs are admitted, or strays to requeue."""
        self._fetching = False

    @property
    def fetching(self) -> bool:
        """A fetch is in flight: a stray pass must not look (see ``__init__``)."""
        return self._fetching

    # -- what the list in Redis should hold ----------------------------------------------

    def in_flight(self) -> set[bytes]:
        """The raws that need an entry on this process's list (relisted after Redis
        lost it; see the module's docstring): running or pending, but not acked, not
        settling, not settled, not unsure, not disowned."""
        skip = self._needless | self._settling | self._unsure | self._disowned
        held = {raw for raw in self.running if raw not in skip}
        held.update(raw for raw, disposition in self.pending.items()
                    if not isinstance(disposition, Ack) and raw not in skip)
        return held

    def strays(self, listed: list[bytes]) -> set[bytes]:
        """The listed jobs to requeue: neither running nor pending, on this pass and the
        one before (the second look rules out a job between its fetch and its admit).
        Each call is one pass; it also asks for a relist when an in-flight job is missing
        from ``listed`` on two passes in a row (a lost FORGOTTEN reply; the second look
        rules out a job admitted after the list was read)."""
        running, pending = self.running, self.pending
        seen = {raw for raw in listed if raw not in running and raw not in pending}
        confirmed = seen & self._suspects
        self._suspects = seen - self._suspects
        missing = self.in_flight().difference(listed)
        if missing & self._missing:
            self._missing = set()
            self.want_relist()
        else:
            self._missing = missing
        return confirmed

    # -- relisting after Redis lost this process's list ---------------------------------

    def want_relist(self) -> None:
        """An in-flight job is missing from the list: ask the fence to list them again."""
        self._relist_wanted = True
        self._on_relist()

    def relist_began(self) -> None:
        """A relist is on its way: it answers every want so far (one asked for from now
        on asks again)."""
        self._relist_wanted = False

    def relist_failed(self) -> None:
        """A relist did not list everything (it failed, was cancelled or refused): still
        wanted."""
        self._relist_wanted = True

    @property
    def relist_wanted(self) -> bool:
        """A relist was asked for and has not yet been done."""
        return self._relist_wanted

    def on_relist_wanted(self, wake: Callable[[], None]) -> None:
        """The fence relists from now on: ``want_relist`` calls ``wake``."""
        self._on_relist = wake

    def follow_beats(self, begun: Callable[[], int]) -> None:
        """The heartbeat is wired: ``begun()`` says how many beats it has begun (read
        from any thread), the number a doubt waits past (``doubt``)."""
        self._beats = begun

    @asynccontextmanager
    async def relisting(self) -> AsyncIterator[None]:
        """Held by a relist: a Filing or GiveBack settle waits for it (``settle_turn``),
        so that no relist lists a job its settle script is removing."""
        await self.settle_turn()
        self._relisting = done = anyio.Event()
        try:
            yield
        finally:
            self._relisting = None
            done.set()

    async def settle_turn(self) -> None:
        """Return once no relist is on its way."""
        while self._relisting is not None:
            await self._relisting.wait()

    def doubt(self, raw: bytes, disposition: Pending, queue: str) -> None:
        """A 0 after a lost reply: settled, unless Redis lost the keys meanwhile."""
        self.doubtful[raw] = (disposition, queue, self._beats())

    def beat_alive(self, beat: int) -> None:
        """Beat number ``beat`` found the keys in place: the doubts of before it began
        were settled by their lost-reply attempt."""
        for raw, (_, _, before) in list(self.doubtful.items()):
            if beat > before:
                del self.doubtful[raw]

    def keys_lost(self, queues: Collection[str]) -> None:
        """Redis lost this process's keys in the slots of ``queues``: a lost reply no
        longer tells that a settle of theirs ran (its effect may be gone with the
        rest), so their doubts are settled again. Other queues' slots kept theirs: a
        doubt there stays a doubt (settled again, it could be filed twice)."""
        self._unsure.difference_update(
            [raw for raw in self._unsure if self.queue_of(raw) in queues])
        for raw, (disposition, queue, _) in list(self.doubtful.items()):
            if queue in queues:
                self.remember(raw, disposition, queue=queue)
                del self.doubtful[raw]

    def disown(self, raws: list[bytes]) -> None:
        """Fencing found these recovered elsewhere: never relisted, nor settled here."""
        self._disowned.update(raws)

    def not_ours(self, listed: set[bytes], among: Collection[bytes] | None = None) -> NotOurs:
        """What this process holds that is no longer on its lists (another process
        recovered it while this one was paused); ``among``: only these raws are judged
        (those held before the lists were read)."""
        def gone(raw: bytes) -> bool:
            return raw not in listed and (among is None or raw in among)

        return NotOurs(
            scopes=[scope for raw, scope in self.scopes.items() if gone(raw)],
            stale=[raw for raw in self.pending if gone(raw)],
            unlisted=[raw for raw in self.running if gone(raw)],
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
