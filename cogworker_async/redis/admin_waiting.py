"""Admin's reads of the jobs waiting for their parents (``options(after=[...])``): a
part of ``Admin`` (``admin.waiting``), read-only.

A waiting job lives in its own queue's slot (``dependencies.py``): the queue's
``waiting`` zset (jid -> since), and per job its ``dep`` hash (its copy, its parents,
on_parent_failure) and ``dep_pending`` set (the parents not yet ended). Every read here
is bounded: one ZCARD a queue, a page of the zset, one job's hash and set (a job has at
most ``definition.MAX_PARENTS`` parents). Nothing is written: a waiting job moves only by
the dep scripts, which the worker runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from cogworker_async.jobs import stored
from cogworker_async.redis.admin_sets import _unreadable
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import Store

PARENTS_SEPARATOR = "\x1e"
"""Between the parents in a dep hash's ``parents`` field (``dep_wait.lua``)."""


@dataclass(frozen=True, slots=True)
class WaitingEntry:
    """One job of a queue's waiting zset, with how many parents it still waits for."""

    jid: str
    since: float
    pending: int


@dataclass(frozen=True, slots=True)
class DepRecord:
    """A waiting job's dep hash and pending set, as stored."""

    raw: bytes
    """Its payload; with ``tail`` non-empty, the text before its first argument."""
    tail: bytes
    """The text after its first argument, which its parent's result becomes ("": none)."""
    policy: str
    parents: list[str]
    """``<queue>/<jid>``, in the order ``after=`` named them."""
    takes_result_of: str | None
    pending: frozenset[str]
    created_at: float | None


def _text(value: Any) -> str:
    return as_bytes(value).decode("utf-8", "replace")


class WaitingReads:
    def __init__(self, store: Store) -> None:
        self.client = store.client
        self.keys = store.keys

    async def waiting_counts(self, names: Sequence[str]) -> list[int]:
        """Jobs waiting for their parents on each queue (ZCARD of its ``waiting`` zset),
        in one round trip; a key of another type counts 0, as the sets' sizes do."""
        if not names:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.zcard(self.keys.waiting(name))
            replies = await pipe.execute(raise_on_error=False)
        return [0 if _unreadable(reply, f"the waiting set of queue {name!r}") else int(reply)
                for name, reply in zip(names, replies, strict=True)]

    async def waiting_window(self, queue: str, start: int, stop: int) -> list[WaitingEntry]:
        """Entries ``start``..``stop`` (inclusive) of ``queue``'s waiting jobs, the
        newest first, each with its pending parents' count (SCARD: no set is read)."""
        try:
            reply: Any = await self.client.zrevrange(self.keys.waiting(queue), start, stop,
                                                     withscores=True)
        except ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                raise
            return []  # a key of another type reads as none waiting, as in waiting_counts
        found: list[tuple[Any, Any]] = list(reply)
        if not found:
            return []
        jids = [_text(member) for member, _ in found]
        async with self.client.pipeline(transaction=False) as pipe:
            for jid in jids:
                pipe.scard(self.keys.dep_pending(queue, jid))
            counts = await pipe.execute(raise_on_error=False)
        return [WaitingEntry(jid, float(score), 0 if isinstance(count, Exception) else int(count))
                for jid, (_, score), count in zip(jids, found, counts, strict=True)]

    async def dep_record(self, queue: str, jid: str) -> DepRecord | None:
        """Job ``jid`` of ``queue``'s dep hash and pending set, read together (one slot,
        one transaction); None if it waits no more (released or ended since)."""
        dep, pending = self.keys.dep(queue, jid), self.keys.dep_pending(queue, jid)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hmget(dep, ["raw", "tail", "policy", "parents", "pass", "created_at"])
            pipe.smembers(pending)
            try:
                fields, members = await pipe.execute()
            except ResponseError as exc:
                if "WRONGTYPE" not in str(exc):
                    raise
                return None  # not a waiting job's keys (a co-tenant's): nothing to show
        raw, tail, policy, parents, passed, created = fields
        if raw is None:
            return None
        return DepRecord(
            raw=as_bytes(raw), tail=as_bytes(tail) if tail is not None else b"",
            policy=_text(policy) if policy is not None else "cancel",
            parents=[p for p in _text(parents or b"").split(PARENTS_SEPARATOR) if p],
            takes_result_of=(_text(passed) or None) if passed is not None else None,
            pending=frozenset(_text(member) for member in members),
            created_at=stored.number(created))
