"""Batch relay: carries members' ends to their batches, and enqueues the callbacks due.

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
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Final

from cogworker_async import job
from cogworker_async.definition import JobDefinition
from cogworker_async.redis.batches import parse_note
from cogworker_async.redis.store import Store

log = logging.getLogger(__name__)

KINDS: Final = ("death", "complete", "success")
"""Callback kinds in the order they are enqueued (a death before the end)."""
MAX_CALLBACK_BYTES: Final = 1_000_000


def callback_jid(bid: str, kind: str) -> str:
    return f"{bid}-{kind}"


class BatchRelay:
    def __init__(self, store: Store, registry: Mapping[str, JobDefinition],
                 queues: Sequence[str]) -> None:
        self.store = store
        self.registry = registry
        self.queues = list(dict.fromkeys(queues))

    async def relay_once(self) -> int:
        """One pass: every served queue's notes, then every batch with callbacks due;
        returns how many notes were applied."""
        applied = 0
        for queue in self.queues:
            applied += await self.relay_notes(queue)
        await self.fire_due()
        return applied

    async def relay_notes(self, queue: str) -> int:
        batches = self.store.batches
        raws = await batches.notes(queue)
        if not raws:
            return 0
        ends: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for raw in raws:
            note = parse_note(raw)
            if note is None:
                log.warning("batch relay: dropping a note that is not one: %r", raw[:200])
                continue
            ends[note.bid].append((note.jid, note.end))
        for bid, members in ends.items():
            await batches.apply(bid, members)
        await batches.drop_notes(queue, raws)
        return len(raws)

    async def fire_due(self) -> None:
        for bid in await self.store.batches.firing():
            record = await self.store.batches.read(bid)
            if record is None:  # expired: nothing to fire; batch_fired forgets it
                await self.store.batches.fired(bid, [], None)
                continue
            due = record.fields.get("fire", "").split()
            try:
                callbacks = json.loads(record.fields.get("callbacks") or "{}")
            except ValueError:
                callbacks = {}
            for kind in (k for k in KINDS if k in due):
                if kind in callbacks:
                    await self._enqueue(bid, kind, callbacks[kind])
            await self.store.batches.fired(bid, due, record.fields.get("parent") or None)

    async def _enqueue(self, bid: str, kind: str, stored: Mapping[str, Any]) -> None:
        name = stored.get("name")
        definition = self.registry.get(name) if isinstance(name, str) else None
        if definition is None:
            log.error("batch %s: its %s callback %r is not a job this worker knows: "
                      "not enqueued", bid, kind, name)
            return
        queue = stored.get("queue") or definition.options.queue
        now = time.time()
        payload = job.build(definition.name, stored.get("args", []), stored.get("kwargs", {}),
                            queue=queue, retry=definition.options.retry, now=now,
                            jid=callback_jid(bid, kind),
                            keep_result=definition.options.keep_result, bid=bid)
        payload["batch_callback"] = kind
        raw = job.encode(payload, MAX_CALLBACK_BYTES)
        await self.store.enqueue(queue, [raw], jids=[payload["jid"]], name=definition.name,
                                 chosen="once")
