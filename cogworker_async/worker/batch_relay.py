"""Batch relay: carries members' ends to their batches and parents' ends to the jobs
waiting for them, and enqueues the callbacks due.

A member's settle script, in its queue's slot, notes its end there (``_record.lua``); a
batch lives in the namespace's slot (``redis/batches.py``). Every worker relays the notes
of the queues it serves, each pass: applied to their batch first (``batch_apply``), then
dropped (``drop_notes``), so a relay that dies between the two applies them again, which
changes nothing (sets, not counters).

Callbacks: the step that ends a batch decides which are due (``_batch.lua``); the relay
enqueues each with a jid made of the batch's id and the kind (``<bid>-complete``), in the
mode that refuses a jid with any record, finished too (``enqueue.lua``, "2"), then says
so (``batch_fired``). A relay that dies between the two enqueues again and is refused:
each callback runs once — as long as the callback's record is kept (``keep_status``),
which a relay's next pass, a poll interval later, is far inside.

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
from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio

from cogworker_async import job
from cogworker_async.definition import JobDefinition
from cogworker_async.redis.batches import NOTES_PER_READ, Note, parse_note
from cogworker_async.redis.dependencies import Parent, parse_watchers
from cogworker_async.redis.errors import ResponseError, Unavailable
from cogworker_async.redis.part import wrong_type
from cogworker_async.redis.store import Store
from cogworker_async.signature import callback_payload
from cogworker_async.worker.streak import Streak

log = logging.getLogger(__name__)

KINDS: Final = ("death", "complete", "success")
"""Callback kinds in the order they are enqueued (a death before the end)."""
MAX_CALLBACK_BYTES: Final = 1_000_000


class BatchRelay:
    def __init__(self, store: Store, registry: Mapping[str, JobDefinition],
                 queues: Sequence[str], max_payload_bytes: int = MAX_CALLBACK_BYTES,
                 interval: float = 1.0) -> None:
        self.store = store
        self.registry = registry
        self.queues = list(dict.fromkeys(queues))
        self.max_payload_bytes = max(max_payload_bytes, MAX_CALLBACK_BYTES)
        self.interval = interval
        self.streak = Streak("batch relay")

    async def run(self) -> None:
        """Relay forever at a jittered interval (the poll interval: processes out of
        step); an outage is said once by the streak, a bug traced, and neither stops it."""
        await anyio.sleep(random.uniform(0, min(self.interval, 0.5)))
        while True:
            try:
                await self.relay_once()
            except Exception as exc:
                self.streak.failed(exc, trace=not isinstance(exc, Unavailable))
            else:
                self.streak.succeeded()
            await anyio.sleep(self.interval * random.uniform(0.5, 1.5))

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
        try:
            await self.fire_due()
        except Exception as exc:
            failure = failure or exc
        if failure is not None:
            raise failure
        return applied

    async def relay_notes(self, queue: str) -> int:
        """Every note of ``queue``'s outbox, a page at a time, until a short page."""
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
                if not bad_data(exc):
                    failure = failure or exc
                    continue
                # this batch's keys (a wrong type): not the others'
                log.error("batch relay: batch %s cannot take its members' ends (%s): "
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
        """A parent's end, to each job waiting for it (``redis/dependencies.py``)."""
        parent = Parent(queue, note.jid)
        result: str | None = None
        for watcher in parse_watchers(note.watchers):
            if watcher.takes_result and note.end == "succeeded" and result is None:
                result = await self._result_of(parent)
            try:
                await self.store.dependencies.apply(
                    watcher.queue, watcher.jid,
                    [(parent, note.end, result if watcher.takes_result and result else "")])
            except Exception as exc:
                if not bad_data(exc):
                    raise  # the note is kept: told again next pass (an end counts once)
                log.error("batch relay: job %s cannot hear that its parent %s %s (%s)",
                          watcher.jid, note.jid, note.end, exc)

    async def _result_of(self, parent: Parent) -> str:
        """The parent's result as JSON, as its record keeps it ("" if it keeps none)."""
        status = await self.store.job_status(parent.jid, [parent.queue])
        if status is None or not status.has_result:
            return ""
        return json.dumps(status.result, separators=(",", ":"))

    async def fire_due(self) -> None:
        for bid in await self.store.batches.firing():
            try:
                await self._fire(bid)
            except ResponseError as exc:
                log.error("batch relay: batch %s: its callbacks could not be enqueued (%s)",
                          bid, exc)

    async def _fire(self, bid: str) -> None:
        record = await self.store.batches.read(bid)
        if record is None:  # expired: nothing to fire; batch_fired forgets it
            await self.store.batches.fired(bid, [], None)
            return
        due = record.fields.get("fire", "").split()
        try:
            callbacks = json.loads(record.fields.get("callbacks") or "{}")
        except ValueError:
            callbacks = {}
        done = []
        for kind in (k for k in KINDS if k in due):
            # Marked fired only once enqueued (or refused: enqueued before); a callback
            # this worker cannot make stays due for a worker that can.
            if kind not in callbacks or await self._enqueue(bid, kind, callbacks[kind]):
                done.append(kind)
        if done:
            await self.store.batches.fired(bid, done, record.fields.get("parent") or None)

    async def _enqueue(self, bid: str, kind: str, stored: Mapping[str, Any]) -> bool:
        name = stored.get("name")
        definition = self.registry.get(name) if isinstance(name, str) else None
        if definition is None:
            log.error("batch %s: its %s callback %r is not a job this worker knows: left "
                      "for a worker that does", bid, kind, name)
            return False
        payload = callback_payload(definition, stored, bid, kind, time.time())
        queue = payload["queue"]
        raw = job.encode(payload, self.max_payload_bytes)
        await self.store.enqueue(queue, [raw], jids=[payload["jid"]], name=definition.name,
                                 chosen="once")
        return True


def _parsed(raw: bytes) -> Note | None:
    note = parse_note(raw)
    if note is None:
        log.warning("batch relay: dropping a note that is not one: %r", raw[:200])
    return note


def bad_data(exc: Exception) -> bool:
    """Whether a relay step failed on its keys' data — a key of another type than the
    script's, which no retry mends: its note is dropped, said in the log. Anything else
    keeps the notes for the next pass: a lost link, a cluster down or moving a slot
    (ClusterDown, TRYAGAIN, MOVED are error replies too), NOPERM, OOM."""
    return wrong_type(exc)
