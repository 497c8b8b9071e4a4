"""Notes relay: carries the notes a job's end leaves in its queue's slot — a batch
member's end to its batch, a parent's end to the jobs waiting for it — and enqueues the
batches' callbacks due. (Named for what it carries: batches and dependencies alike.)

A member's settle script, in its queue's slot, notes its end there (``_record.lua``); a
batch lives in the namespace's slot (``redis/batches.py``). Every worker relays the notes
of the queues it serves — at once when the script that wrote one publishes on the notes
list's name (a hand-off in a few round trips), and in each pass at the poll interval,
which makes up a wake-up missed: applied to their batch first (``batch_apply``), then
dropped (``drop_notes``), so a relay that dies between the two applies them again, which
changes nothing (sets, not counters).

Callbacks: the step that ends a batch decides which are due (``_batch.lua``); the relay
enqueues each with a jid made of the batch's id and the kind (``<bid>-complete``), in the
mode that refuses a jid with any record, finished too (``enqueue.lua``, "2"), then says
so (``batch_fired``). A relay that dies between the two enqueues again and is refused:
each callback runs once — as long as the callback's record is kept (``keep_status``),
which a relay's next pass, a poll interval later, is far inside.

Notes of a queue no worker serves (a member cancelled there, by ``cancel_batch`` or a
hand) are relayed too: every ``UNSERVED_EVERY`` seconds one worker of the namespace
(under a short lock) relays the notes of every registered queue it does not serve.

Each batch stands alone: one whose keys are damaged (a co-tenant's garbage) or whose
callback's node is away is logged, put off (``batches.later``) and skipped — never
holding up the others' callbacks; the blocks of processes that died inside them are
let go (``batch_reaper.py``). A key every batch needs (the firing set, the open index)
of another type is no batch's own damage: the relay's log line names it (WrongTypeKey),
the notes are kept until it is deleted, and no batch is opened meanwhile (batch_open).

Dependents: a note that names watchers (a parent's end, ``redis/dependencies.py``) is
applied to each of them (``dep_apply``, in the dependent's slot) before it is dropped,
with the parent's result for one that takes it; each pass also arms again the jobs of
the served queues whose enqueuer died before watching every parent.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Final

import anyio

from cogworker_async.errors import WrongTypeKey, why
from cogworker_async.jobs import wire
from cogworker_async.jobs.definition import JobDefinition
from cogworker_async.jobs.signature import callback_payload
from cogworker_async.redis.batches import NOTES_PER_READ, Note, parse_note
from cogworker_async.redis.errors import Unavailable
from cogworker_async.redis.part import wrong_type
from cogworker_async.redis.store import Store
from cogworker_async.worker import dependents_relay
from cogworker_async.worker.batch_reaper import BatchReaper
from cogworker_async.worker.streak import Streak

log = logging.getLogger(__name__)

KINDS: Final = ("death", "complete", "success")
"""Callback kinds in the order they are enqueued (a death before the end)."""
MAX_CALLBACK_BYTES: Final = 1_000_000
UNSERVED_EVERY: Final = 5.0
"""Seconds between two relays of the notes of the queues no worker may serve."""
AWAY_DELAY: Final = 5.0
"""Seconds a batch whose callback could not be enqueued (its node away) is put off."""
DAMAGED_DELAY: Final = 300.0
"""Seconds a batch whose keys are damaged is put off (and said again)."""


class NodeAway(Exception):
    """A callback's queue whose node failed earlier in this pass: not called again in it
    (a hung node would cost a socket timeout per batch)."""


class NotesRelay:
    def __init__(self, store: Store, registry: Mapping[str, JobDefinition],
                 queues: Sequence[str], max_payload_bytes: int = MAX_CALLBACK_BYTES,
                 interval: float = 1.0, identity: str = "", judge_after: float = 0.0,
                 ) -> None:
        self.store = store
        self.registry = registry
        self.queues = list(dict.fromkeys(queues))
        self.max_payload_bytes = max(max_payload_bytes, MAX_CALLBACK_BYTES)
        self.job_bytes = max_payload_bytes  # what a worker reads: a released dependent's
        self.interval = interval
        self.identity = identity
        self.streak = Streak("notes relay")
        self.reaper = BatchReaper(store, identity, judge_after=judge_after)
        self._next_unserved = 0.0
        self._swept: dict[str, str] = {}  # an unserved queue -> its sweep's cursor
        self._away: set[str] = set()
        self._wake = anyio.Event()
        self._woken: set[str] = set()  # queues whose writers published a note

    def wake(self, queue: str) -> None:
        """A note was written in ``queue``'s slot (its writer published on the notes
        list's name): relay it now, not at the next poll."""
        self._woken.add(queue)
        self._wake.set()

    async def run(self) -> None:
        """Relay forever: a whole pass at a jittered interval (the poll interval:
        processes out of step), and between two, the notes of each queue woken (a
        hand-off in a few round trips). The poll stays the bound: a wake-up missed (the
        channel down, a note written by a process that serves nothing) waits for it. An
        outage is said once by the streak, a bug traced, and neither stops it."""
        await anyio.sleep(random.uniform(0, min(self.interval, 0.5)))
        while True:
            await self._step(self.relay_once)
            deadline = anyio.current_time() + self.interval * random.uniform(0.5, 1.5)
            while (left := deadline - anyio.current_time()) > 0:
                with anyio.move_on_after(left):
                    await self._wake.wait()
                if not self._wake.is_set():
                    break
                self._wake = anyio.Event()
                woken, self._woken = self._woken, set()
                await self._step(partial(self.relay_woken, woken))

    async def _step(self, step: Callable[[], Awaitable[object]]) -> None:
        try:
            await step()
        except Exception as exc:  # a co-tenant's key (WrongTypeKey) names itself
            self.streak.failed(exc, trace=not isinstance(exc, (*Unavailable, WrongTypeKey)))
        else:
            self.streak.succeeded()

    async def relay_woken(self, queues: Iterable[str]) -> int:
        """The notes of ``queues`` (each woken by a note), then the callbacks due: the
        part of a pass a hand-off waits for. Like a pass, a queue that fails is skipped
        and its failure raised at the end."""
        applied, failure = 0, None
        for queue in sorted(queues):
            try:
                applied += await self.relay_notes(queue)
            except Exception as exc:
                failure = failure or exc
        try:
            await self.fire_due()
        except Exception as exc:
            failure = failure or exc
        if failure is not None:
            raise failure
        return applied

    async def relay_once(self) -> int:
        """One pass: every served queue's notes, then every batch with callbacks due;
        returns how many notes were applied. A queue or a batch that fails (a key of
        the wrong type, Redis refusing) is logged and skipped, never holding up the
        others; the first failure is raised at the end, for the poller's streak."""
        applied, failure = 0, None
        clock: float | None = None  # Redis' clock, read once a pass (not once a queue)
        for queue in self.queues:
            try:
                applied += await self.relay_notes(queue)
                clock = clock if clock is not None else await self.store.dependencies.clock()
                await self.store.dependencies.rearm(queue, now=clock)
            except Exception as exc:
                failure = failure or exc
        for step in (self.relay_unserved, self.reaper.reap, self.fire_due):
            try:
                await step()
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return applied

    async def relay_unserved(self, force: bool = False) -> None:
        """Every ``UNSERVED_EVERY`` seconds, by one worker of the namespace at a time:
        the notes of each registered queue this worker does not serve (a queue no
        worker serves has ends to relay too: a member or a parent cancelled there); and a
        step of the sweep of their live records, which no worker's upkeep sweeps (a
        watched parent that vanished there is closed, its end noted: sweep_records.lua)."""
        now = time.monotonic()
        if not force and now < self._next_unserved:
            return
        self._next_unserved = now + UNSERVED_EVERY
        store = self.store
        if not await store.take_lock(store.keys.notes_lock, self.identity or "relay",
                                     UNSERVED_EVERY * 0.8):
            return
        failure: Exception | None = None
        for queue in sorted(set(await store.queue_names()) - set(self.queues)):
            try:
                await self.relay_notes(queue)
                self._swept[queue], _ = await store.sweep_records(  # its end: next pass
                    queue, self._swept.get(queue, "0"))
            except Exception as exc:  # that queue's node away, its notes garbage: the rest
                failure = failure or exc
        if failure is not None:
            raise failure

    async def relay_notes(self, queue: str) -> int:
        """Every note of ``queue``'s notes list, a page at a time, until a short page."""
        relayed = 0
        while True:
            raws = await self.store.batches.notes(queue)
            if not raws:
                return relayed
            await self._relay_page(queue, raws)
            relayed += len(raws)
            if len(raws) < NOTES_PER_READ:
                return relayed

    async def _relay_page(self, queue: str, raws: list[bytes]) -> None:
        batches = self.store.batches
        ends: dict[str, list[tuple[str, str]]] = defaultdict(list)
        notes = [note for note in map(_parsed, raws) if note is not None]
        for note in notes:
            if note.bid:
                ends[note.bid].append((note.jid, note.end))
        watched = [note for note in notes if note.watchers]
        failure: Exception | None = None
        for bid, members in ends.items():
            try:
                await batches.apply(bid, members)
            except Exception as exc:
                if not bad_data(exc):  # a WrongTypeKey is the namespace's firing set or
                    failure = failure or exc  # open index: the notes wait for its delete
                    continue
                # this batch's keys (a wrong type): not the others'
                log.error("notes relay: batch %s cannot take its members' ends (%s): "
                          "its notes are dropped", bid, exc)
        for note in watched:
            try:
                await self._tell_dependents(queue, note)
            except Exception as exc:
                failure = failure or exc
        if failure is not None:  # nothing dropped: the notes are applied again next pass
            raise failure
        await batches.drop_notes(queue, raws)

    async def _tell_dependents(self, queue: str, note: Note) -> None:
        """A parent's end, to each job waiting for it (``dependents_relay.py``)."""
        await dependents_relay.tell(self.store, queue, note, self.job_bytes)

    async def fire_due(self) -> None:
        """Each batch due, on its own: one that fails is put off and the others go on;
        the first node away is raised at the end (the streak says it once)."""
        self._away, away = set(), None
        for bid in await self.store.batches.firing():
            try:
                await self._fire(bid)
            except Exception as exc:
                damaged = not isinstance(exc, (*Unavailable, NodeAway)) or wrong_type(exc)
                if damaged:
                    log.error("notes relay: batch %s is damaged (%s): its callbacks are put "
                              "off %.0f s; the other batches go on", bid, why(exc),
                              DAMAGED_DELAY)
                else:
                    away = away or exc
                try:
                    await self.store.batches.later(bid, DAMAGED_DELAY if damaged else AWAY_DELAY)
                except Exception as later:  # the namespace's node away: nothing goes on
                    raise later from exc
        if away is not None and not isinstance(away, NodeAway):
            raise away

    async def _fire(self, bid: str) -> None:
        record = await self.store.batches.read(bid)
        if record is None:  # expired: nothing to fire; batch_fired forgets it
            await self.store.batches.fired(bid, [], None)
            return
        due = record.fields.get("fire", "").split()
        callbacks = _callbacks(bid, record.fields.get("callbacks"))
        done = []
        for kind in (k for k in KINDS if k in due):
            # Marked fired only once enqueued (or refused: enqueued before); a callback
            # this worker cannot make stays due for a worker that can.
            if kind not in callbacks or await self._enqueue(bid, kind, callbacks[kind]):
                done.append(kind)
        if done:
            await self.store.batches.fired(bid, done, record.fields.get("parent") or None)

    async def _enqueue(self, bid: str, kind: str, stored: object) -> bool:
        if not isinstance(stored, dict):
            log.error("batch %s: its %s callback is not one (%r): none is enqueued", bid,
                      kind, stored)
            return True
        name = stored.get("name")
        definition = self.registry.get(name) if isinstance(name, str) else None
        if definition is None:
            log.error("batch %s: its %s callback %r is not a job this worker knows: left "
                      "for a worker that does", bid, kind, name)
            return False
        payload = callback_payload(definition, stored, bid, kind, time.time())
        queue = payload["queue"]
        if queue in self._away:
            raise NodeAway(queue)
        raw = wire.encode(payload, self.max_payload_bytes)
        try:
            await self.store.enqueue(queue, [raw], jids=[payload["jid"]],
                                     name=definition.name, chosen="once")
        except Unavailable as exc:
            if not wrong_type(exc):
                self._away.add(queue)
            raise
        return True


def _callbacks(bid: str, text: str | None) -> Mapping[str, Any]:
    """A batch's callbacks as stored; none when they cannot be read (damaged: said, and
    the batch ends without them rather than never)."""
    try:
        found = json.loads(text or "{}")
    except (ValueError, RecursionError) as exc:
        found = exc
    if not isinstance(found, dict):
        log.error("batch %s: its callbacks cannot be read (%r): none is enqueued", bid,
                  found if isinstance(found, Exception) else type(found).__name__)
        return {}
    return found


def _parsed(raw: bytes) -> Note | None:
    note = parse_note(raw)
    if note is None:
        log.warning("notes relay: dropping a note that is not one: %r", raw[:200])
    return note


def bad_data(exc: Exception) -> bool:
    """Whether a relay step failed on its keys' data — a key of another type than the
    script's, which no retry mends: its note is dropped, said in the log. Anything else
    keeps the notes for the next pass: a lost link, a cluster down or moving a slot
    (ClusterDown, TRYAGAIN, MOVED are error replies too), NOPERM, OOM."""
    return wrong_type(exc)
