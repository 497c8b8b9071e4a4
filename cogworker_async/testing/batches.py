"""The fake's batches: what ``redis/lua/_batch.lua`` and the relay do, in memory.

A member's end (``World.end``) moves its jid between the sets, and what the batch has
come to is decided as ``batch_decide`` decides it (only once sealed; each kind once);
the callbacks due are added to the fake's jobs at once, each with the jid the relay
would give it (``<bid>-<kind>``, refused once it exists), so ``drain()`` runs them after
the members, and a parent ends once its children have. In an ``inline()`` block the
callbacks decided at the seal run at once, as every enqueue there does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cogworker_async.enqueue.client import Push
from cogworker_async.jobs import wire
from cogworker_async.jobs.definition import JobDefinition
from cogworker_async.jobs.signature import callback_payload
from cogworker_async.redis.batches import BatchEnded, BatchRecord
from cogworker_async.worker.notes_relay import KINDS, MAX_CALLBACK_BYTES

FINAL = ("success", "complete", "dead", "abandoned")


@dataclass
class FakeBatch:
    bid: str
    description: str
    callbacks: dict[str, dict[str, Any]]
    parent: str | None
    created_at: float
    state: str = "open"
    sealed: bool = False
    total: int = 0
    sets: dict[str, set[str]] = field(default_factory=lambda: {
        "pending": set(), "succeeded": set(), "dead": set(), "cancelled": set(),
        "children": set(), "kids": set()})
    decided: list[str] = field(default_factory=list)
    finished_at: float | None = None
    holders: list[str] = field(default_factory=list)


class FakeBatches:
    """The batch operations ``Batch`` calls (``redis/batches.py``'s), in memory."""

    def __init__(self, registry: Mapping[str, JobDefinition],
                 add: Callable[[Push], bool]) -> None:
        self._registry = registry
        self._add = add
        """Adds a callback to the fake's jobs; False if its jid exists (``once``)."""
        self.batches: dict[str, FakeBatch] = {}
        self.run_now: Callable[[list[Push]], Any] | None = None
        """Set in an ``inline()`` block: runs callbacks decided at a seal at once."""

    def clear(self) -> None:
        self.batches.clear()

    async def open(self, bid: str, *, description: str = "", callbacks: str = "{}",
                   parent: str | None = None, now: float | None = None, token: str = "",
                   reopen: bool = False) -> str:
        found = self.batches.get(bid)
        if found is not None:
            if found.state in FINAL:
                raise BatchEnded(f"ENDED batch {bid} has ended ({found.state})")
            found.sealed = False
            if token not in found.holders:
                found.holders.append(token)
            return "reopened"
        if reopen:
            raise BatchEnded(f"NOBATCH batch {bid} does not exist (or expired)")
        if parent is not None:
            upper = self.batches.get(parent)
            if upper is None or upper.state in FINAL:
                raise BatchEnded(f"NOPARENT batch {parent} "
                                 f"{'has ended' if upper else 'does not exist'}")
            upper.sets["children"].add(bid)
            upper.sets["kids"].add(bid)
        self.batches[bid] = FakeBatch(bid, description, json.loads(callbacks), parent,
                                      now or time.time(), holders=[token])
        return "opened"

    def _open(self, bid: str) -> FakeBatch:
        found = self.batches.get(bid)
        if found is None:
            raise BatchEnded(f"NOBATCH batch does not exist: {bid}")
        if found.sealed or found.state in FINAL:
            raise BatchEnded(f"SEALED batch is not open ({found.state}): {bid}")
        return found

    async def add(self, bid: str, jids: Sequence[str], token: str = "",
                  renew: Sequence[tuple[str, str]] = ()) -> list[str]:
        """``batch_add``; a block's lease (``hold``) never lapses here: no relay runs."""
        found = self._open(bid)
        joined = []
        for jid in jids:
            if not any(jid in found.sets[s] for s in ("succeeded", "dead", "cancelled")) \
                    and jid not in found.sets["pending"]:
                found.sets["pending"].add(jid)
                found.total += 1
                joined.append(jid)
        return joined

    async def leave(self, bid: str, jids: Sequence[str], token: str = "") -> int:
        found = self._open(bid)
        left = 0
        for jid in jids:
            if jid in found.sets["pending"]:
                found.sets["pending"].discard(jid)
                found.total -= 1
                left += 1
        return left

    async def abandon(self, bid: str, parent: str | None, now: float | None = None,
                      token: str = "") -> str | None:
        found = self.batches.get(bid)
        if found is None:
            return None
        if found.state in FINAL:
            return found.state
        found.holders = [t for t in found.holders if t != token]
        if found.holders:
            return found.state
        found.state, found.sealed, found.finished_at = "abandoned", True, time.time()
        upper = self.batches.get(parent) if parent else None
        if upper is not None and bid in upper.sets["children"]:
            upper.sets["children"].discard(bid)
            self._decide(upper)
        return found.state

    async def seal(self, bid: str, now: float | None = None, token: str = "") -> str | None:
        found = self.batches.get(bid)
        if found is None:
            return None
        found.holders = [t for t in found.holders if t != token]
        if found.holders:
            return found.state
        found.sealed = True
        pushes = self._decide(found)
        if pushes and self.run_now is not None:
            await self.run_now(pushes)
        return found.state

    async def release(self, bid: str, tokens: Sequence[str] | None, parent: str | None,
                      now: float | None = None) -> str | None:
        """``batch_release``: let go of the blocks of ``tokens`` (None: every one)."""
        found = self.batches.get(bid)
        if found is None or found.state in FINAL:
            return found.state if found is not None else None
        dropped = [t for t in found.holders if tokens is None or t in tokens]
        found.holders = [t for t in found.holders if t not in dropped]
        if found.holders or (not dropped and tokens is not None):
            return found.state
        if tokens is not None and any(".n@" in token or ".n~" in token for token in dropped):
            return await self.abandon(bid, found.parent, now)
        return await self.seal(bid, now)

    async def apply(self, bid: str, ends: Sequence[tuple[str, str]],
                    now: float | None = None) -> str | None:
        for jid, end in ends:
            self.ended(bid, jid, end)
        found = self.batches.get(bid)
        return found.state if found is not None else None

    def ended(self, bid: str, jid: str, end: str) -> None:
        """A member's end (``World.end``): ``batch_apply``, then the relay's firing."""
        found = self.batches.get(bid)
        if found is None:
            return
        for source in (("pending", "dead") if end == "succeeded" else ("pending",)):
            if jid in found.sets[source]:
                found.sets[source].discard(jid)
                found.sets[end].add(jid)
                break
        self._decide(found)

    def _decide(self, found: FakeBatch) -> list[Push]:
        if not found.sealed or found.state == "abandoned":
            return []
        new: list[str] = []
        sets = found.sets
        if sets["dead"] and "death" not in found.decided:
            new.append("death")
        if not sets["pending"] and not sets["children"]:
            final = "dead" if sets["dead"] else "complete" if sets["cancelled"] else "success"
            if found.state not in FINAL:
                found.finished_at = time.time()
            found.state = final
            new += [k for k in ("complete", "success")
                    if k not in found.decided and (k == "complete" or final == "success")]
        elif found.state == "open":
            found.state = "running"
        found.decided += new
        pushes = [push for kind in KINDS if kind in new and kind in found.callbacks
                  if (push := self._callback(found, kind)) is not None]
        if found.state in FINAL and new and found.parent is not None:
            upper = self.batches.get(found.parent)
            if upper is not None and found.bid in upper.sets["children"]:
                upper.sets["children"].discard(found.bid)
                pushes += self._decide(upper)
        return pushes

    def _callback(self, found: FakeBatch, kind: str) -> Push | None:
        stored = found.callbacks[kind]
        definition = self._registry.get(stored.get("name", ""))
        if definition is None:
            return None
        payload = callback_payload(definition, stored, found.bid, kind, time.time())
        push = Push(payload["queue"], wire.encode(payload, MAX_CALLBACK_BYTES), payload["jid"])
        return push if self._add(push) else None

    async def read(self, bid: str) -> BatchRecord | None:
        found = self.batches.get(bid)
        if found is None:
            return None
        fields = {"state": found.state, "description": found.description,
                  "holders": " ".join(found.holders),
                  "sealed": "1" if found.sealed else "0", "parent": found.parent or "",
                  "callbacks": json.dumps(found.callbacks), "total": str(found.total),
                  "fired": " ".join(found.decided), "created_at": repr(found.created_at)}
        if found.finished_at is not None:
            fields["finished_at"] = repr(found.finished_at)
        s = found.sets
        return BatchRecord(bid, fields, len(s["pending"]), len(s["succeeded"]), len(s["dead"]),
                           len(s["cancelled"]), sorted(s["kids"]))

    async def members(self, bid: str, which: str) -> list[str]:
        found = self.batches.get(bid)
        return sorted(found.sets[which]) if found is not None else []
