"""The fake's jobs: waiting (queued, scheduled, retrying), held for their parents
(``after=``), running, and how each ended.

It stands where Redis' lists, sets and status records stand, with their rules: a
chosen jid is refused while a job with it is alive in any queue (``enqueue.lua``), a
job moved onto its queue when due gets the queue and a fresh ``enqueued_at`` (the
poller's promotion), and a job's status reads as ``jobs.status(jid)`` would. A held job
is never taken by a drain: ``testing/dependencies.py`` releases it onto ``waiting``.
Nor is a job of a paused queue (``paused``, ``jobs.queues.pause``): it stays queued, as
``fetch.lua`` leaves it, until the queue is resumed.

Order: the fair groups of a queue that have jobs due now take turns (``options(group=)``;
the jobs without a group take one turn together), as the fetch serves its ring; then
jobs run by priority (``options(priority=N)``, highest first: the fetch's order with
aging off: a drain lasts too short a time for aging to matter, and a drain where it
would raises ``NotFaked``, ``aged``), and within one priority
(within a group: always) in the order they arrived (a queue is first in, first out; a retry waits
behind what was already queued, as after its promotion); scheduled jobs, when a drain
includes them, by due time.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cogworker_async.jobs import wire
from cogworker_async.jobs.groups import group_of
from cogworker_async.jobs.retries import attempt_of
from cogworker_async.jobs.status import FINISHED, CancelOutcome, JobStatus, error_text, unknown
from cogworker_async.redis.pausing import Pause
from cogworker_async.testing.records import Enqueued, Run, Waiting

Key = tuple[str, str]
"""(queue, jid): one job, as Redis' keys name it."""


@dataclass(slots=True)
class Entry:
    """One waiting job, as stored: its raw bytes."""

    raw: bytes
    queue: str
    jid: str
    state: Waiting
    due: float | None
    order: int = 0

    def payload(self) -> wire.Payload:
        return wire.decode(self.raw, wire.NO_SIZE_LIMIT)

    @property
    def priority(self) -> int:
        return wire.priority_of(self.raw)

    @property
    def enqueued_at(self) -> float:
        return wire.number(self.payload(), "enqueued_at") or 0.0

    @property
    def group(self) -> str:
        """Its fair group ("" for none: the jobs without a group take a turn together)."""
        return group_of(self.raw) or ""

    def rank(self) -> tuple[int, int]:
        """Its place within its group: a group's jobs in order, others by priority."""
        return (0 if self.group else -self.priority, self.order)


@dataclass(slots=True)
class World:
    waiting: list[Entry] = field(default_factory=list)
    running: set[tuple[str, str]] = field(default_factory=set)
    """(queue, jid) of the runs in progress."""
    ended: dict[tuple[str, str], JobStatus] = field(default_factory=dict)
    """(queue, jid) -> its status once it ended (succeeded, dead, cancelled)."""
    runs: list[Run] = field(default_factory=list)
    held: dict[Key, Entry] = field(default_factory=dict)
    """Jobs waiting for their parents (state ``waiting``), as Redis' dep hashes hold
    them: alive, cancellable, never taken by a drain until ``release``d."""
    members: dict[str, str] = field(default_factory=dict)
    """jid -> the batch it is a member of (its payload's ``bid``)."""
    on_end: Callable[[str, str, str], None] | None = None
    """Told (bid, jid, end) when a batch's member ends (``testing/batches.py``)."""
    on_finish: Callable[[str, str, JobStatus], None] | None = None
    """Told (queue, jid, status) when any job ends: the jobs waiting for it hear of it
    (``testing/dependencies.py``)."""
    turns: dict[tuple[str, str], int] = field(default_factory=dict)
    """(queue, group) -> its place in the queue's ring: the lowest goes next; a group
    that gets jobs again after it had none joins at the back. The jobs without a group
    (group "") are in the ring only from the first take that finds them waiting beside
    a group, until none is left (``_queue.lua``): never from their push."""
    paused: dict[str, Pause] = field(default_factory=dict)
    """The paused queues (``redis/pausing.py``'s flags): no drain takes their jobs."""
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def clear(self) -> None:
        self.waiting.clear()
        self.running.clear()
        self.ended.clear()
        self.runs.clear()
        self.held.clear()
        self.members.clear()
        self.turns.clear()
        self.paused.clear()

    def queues(self) -> set[str]:
        """The queues a job of this world was pushed on (Redis' registered queues)."""
        return {entry.queue for entry in [*self.waiting, *self.held.values()]} | {
            queue for queue, _ in [*self.running, *self.ended]}

    def alive(self, jid: str) -> bool:
        """Queued, scheduled, running, retrying or waiting in any queue (a chosen jid's
        test: the client looks in every queue, as ``Client._alive_elsewhere`` does)."""
        return any(running == jid for _, running in self.running) or any(
            entry.jid == jid for entry in self.waiting) or any(
            held == jid for _, held in self.held)

    def add(self, raw: bytes, queue: str, jid: str, *, due: float | None,
            state: Waiting) -> Entry:
        entry = self._new(raw, queue, jid, due, state)
        self._join(entry)
        self.waiting.append(entry)
        return entry

    def _join(self, entry: Entry) -> None:
        """A group with nothing waiting joins its queue's ring at the back (``push``);
        the jobs without a group join at a take instead (``_join_plain``)."""
        if entry.group and not any(other.queue == entry.queue and other.group == entry.group
                   for other in self.waiting):
            self.turns[(entry.queue, entry.group)] = next(self._counter)

    def hold(self, raw: bytes, queue: str, jid: str) -> Entry:
        """A job that waits for its parents (``dep_wait.lua``)."""
        entry = self._new(raw, queue, jid, None, "waiting")
        self.held[(queue, jid)] = entry
        return entry

    def release(self, key: Key, raw: bytes) -> Entry:
        """A held job whose parents have ended, pushed onto its queue behind what is
        already there (``dep_apply.lua``), as ``raw`` (with its parent's result)."""
        held = self.held.pop(key)
        entry = Entry(raw, held.queue, held.jid, "queued", None, next(self._counter))
        self._join(entry)
        self.waiting.append(entry)
        return entry

    def _new(self, raw: bytes, queue: str, jid: str, due: float | None,
             state: Waiting) -> Entry:
        self.ended.pop((queue, jid), None)  # a chosen jid used again: its old end goes
        entry = Entry(raw, queue, jid, state, due, next(self._counter))
        bid = entry.payload().get("bid")
        if isinstance(bid, str) and "batch_callback" not in entry.payload():
            self.members[jid] = bid
        return entry

    def put_back(self, entry: Entry) -> None:
        """A job taken but never started: first in line again."""
        self.running.discard((entry.queue, entry.jid))
        self.waiting.insert(0, entry)

    def next_due(self, *, scheduled: bool, retries: bool) -> Entry | None:
        """The job to run next, if any (``scheduled``: jobs due later count as due;
        ``retries``: retries run without waiting for their delay)."""
        now = time.time()
        fetchable = [entry for entry in self.waiting if entry.queue not in self.paused]
        ready = [entry for entry in fetchable
                 if entry.due is None or entry.due <= now
                 or (retries and entry.state == "retrying")]
        if ready:
            self._join_plain(ready)
            return min(ready, key=lambda entry: (self._turn(entry, ready), *entry.rank()))
        later = [entry for entry in fetchable if scheduled]
        return min(later, key=lambda entry: (entry.due or now, entry.order), default=None)

    def aged(self, aging: float | None) -> tuple[Entry, Entry] | None:
        """Two queued jobs whose order priority aging would swap, if any: the fake orders
        with aging off (``NotFaked``). Aging puts the earlier job ``a`` first iff the
        later ``b`` came more than ``(b.priority - a.priority) × aging`` seconds after it
        (``_queue.lua``'s score: ``enqueued_at - priority × aging``, least first).
        Grouped jobs keep their group's order, whatever their priority."""
        if aging is None:
            return None
        earliest: dict[tuple[str, int], Entry] = {}  # (queue, priority) -> first queued
        for entry in sorted(self.waiting, key=lambda entry: entry.order):
            if entry.state != "queued" or entry.group:
                continue
            for (queue, priority), first in earliest.items():
                if queue == entry.queue and priority < entry.priority and \
                        entry.enqueued_at - first.enqueued_at > (entry.priority - priority) * aging:
                    return first, entry
            earliest.setdefault((entry.queue, entry.priority), entry)
        return None

    def _join_plain(self, ready: list[Entry]) -> None:
        """At a take, the jobs without a group join their queue's ring at its back if
        it exists (a group has jobs waiting) and they are not in it yet."""
        for queue in {entry.queue for entry in ready if not entry.group}:
            if (queue, "") not in self.turns and any(
                    entry.group and entry.queue == queue for entry in ready):
                self.turns[(queue, "")] = next(self._counter)

    def _turn(self, entry: Entry, ready: list[Entry]) -> int:
        """Its group's place in the ring; the jobs without a group out of the ring (no
        group waits beside them) share their first one's place."""
        turn = self.turns.get((entry.queue, entry.group))
        if turn is not None:
            return turn
        return min(other.order for other in ready
                   if other.queue == entry.queue and other.group == entry.group)

    def take(self, *, scheduled: bool, retries: bool) -> Entry | None:
        """``next_due``, taken off the waiting jobs and marked running."""
        chosen = self.next_due(scheduled=scheduled, retries=retries)
        if chosen is None:
            return None
        self.waiting.remove(chosen)
        self.running.add((chosen.queue, chosen.jid))
        # its group to the back of the ring (``turned``, redis/lua/_queue.lua); the
        # jobs without a group leave it when none is left
        if chosen.group:
            self.turns[(chosen.queue, chosen.group)] = next(self._counter)
        elif (chosen.queue, "") in self.turns:
            if any(not entry.group and entry.queue == chosen.queue for entry in self.waiting):
                self.turns[(chosen.queue, "")] = next(self._counter)
            else:
                del self.turns[(chosen.queue, "")]
        if chosen.state != "queued":  # moved onto its queue as the poller does
            payload = chosen.payload()
            payload["queue"] = chosen.queue
            payload["enqueued_at"] = time.time()
            chosen.raw = wire.encode(payload, wire.NO_SIZE_LIMIT)
        return chosen

    def end(self, queue: str, jid: str, status: JobStatus) -> None:
        self.running.discard((queue, jid))
        self.ended[(queue, jid)] = status
        if status.state not in FINISHED:
            return
        bid = self.members.get(jid)
        if bid is not None and self.on_end is not None:
            self.on_end(bid, jid, status.state)
        if self.on_finish is not None:
            self.on_finish(queue, jid, status)

    def known(self, jid: str) -> bool:
        """Any job with this jid, waiting, running or ended (a callback's ``once``)."""
        return self.alive(jid) or any(ended == jid for _, ended in self.ended)

    def enqueued(self, name: str | None = None, queue: str | None = None) -> list[Enqueued]:
        found = []
        for entry in sorted([*self.waiting, *self.held.values()],
                            key=lambda entry: entry.order):
            payload = entry.payload()
            if (name is None or payload["class"] == name) and \
                    (queue is None or entry.queue == queue):
                found.append(Enqueued(
                    jid=entry.jid, name=payload["class"], args=payload["args"],
                    kwargs=payload["kwargs"], queue=entry.queue, state=entry.state,
                    due_at=entry.due, payload=dict(payload)))
        return found

    def cancel(self, jid: str, queue: str | None = None) -> CancelOutcome:
        """What ``jobs.cancel(jid)`` does to a faked job (``cancel.lua``): a waiting one
        (or one held for its parents) is dropped unrun and ends cancelled — which the
        jobs waiting for it hear, as of any end."""
        for entry in [*self.waiting, *self.held.values()]:
            if entry.jid == jid and queue in (None, entry.queue):
                if self.held.get((entry.queue, jid)) is entry:
                    del self.held[(entry.queue, jid)]
                else:
                    self.waiting.remove(entry)
                self.end(entry.queue, jid, JobStatus(
                    jid=jid, state="cancelled", queue=entry.queue,
                    name=entry.payload()["class"], finished_at=time.time()))
                return "cancelled"
        found = self.status(jid, queue)
        if found.state == "running":
            raise RuntimeError(f"job {jid} is running in this drain: a faked run cannot be "
                               "stopped from outside (test the job's own cancel_requested)")
        return "unknown" if found.state == "unknown" else "finished"

    def status(self, jid: str, queue: str | None = None) -> JobStatus:
        """What ``jobs.status(jid)`` would say of a faked job."""
        for entry in [*reversed(self.waiting), *self.held.values()]:
            if entry.jid == jid and queue in (None, entry.queue):
                return waiting_status(entry)
        for running_queue, running_jid in self.running:
            if running_jid == jid and queue in (None, running_queue):
                return JobStatus(jid=jid, state="running", queue=running_queue)
        for (ended_queue, ended_jid), status in reversed(self.ended.items()):
            if ended_jid == jid and queue in (None, ended_queue):
                return status
        return unknown(jid)


def waiting_status(entry: Entry) -> JobStatus:
    payload = entry.payload()
    return JobStatus(jid=entry.jid, state=entry.state, queue=entry.queue,
                     name=payload["class"], attempt=attempt_of(payload),
                     enqueued_at=wire.number(payload, "enqueued_at"),
                     error=failure_text(payload))


def failure_text(payload: wire.Payload) -> str | None:
    """A status' ``error`` (``Class: message``) from a filed entry, if it failed."""
    error_class = wire.text(payload, "error_class")
    if error_class is None:
        return None
    return error_text(error_class, wire.text(payload, "error_message") or "")
