"""Reaper: lets go of the batch blocks of worker processes that died inside them, and of
the blocks outside workers whose lease lapsed.

A block that opens a batch (or reopens one) holds it open until it exits; a job's block
killed with its process (SIGKILL, OOM) never exits, and its batch — and the batch's
parent — would wait for good, while the recovered run opens another. In a worker
process a block's token names the process (``batch.holder_token``), and every batch a
worker's block holds is listed (``Keys.batches_held``). Each relay pass reads that list
(``HELD_PER_PASS`` at a time, in turns) and lets go of each token whose process is gone
— no alive marker and no last beat, on every pass over ``orphan_threshold`` (``_judge``):
recovery forgot it once its jobs were back (``forget.lua``), or it stopped — and of
each token naming this very process that no block of it holds (an earlier process of
the same configured identity, or a seal that failed). A batch left with no holder is
sealed, as at its block's exit; one opened by a
block that died ends abandoned, as if that block had raised. Letting go of a dead block
marks the batch, which stays listed until it is repaired, once no block holds it: a
member the dead block joined but never pushed counts cancelled, and an abandoned
batch's pending members are cancelled (the recovered run enqueues its own) — then the
mark goes (``_repair``: a relay that dies halfway leaves it to the next pass).

A block in a process that is not a worker (a web process, a script) names no process
whose end can be judged: its token carries a lease instead ("<nonce>.<n|r>~<ms>",
``batch.HOLD`` or the block's ``hold``), renewed by its open and each member it adds.
Each pass lets go of the leases lapsed on Redis' clock, as of a dead process's blocks
(``batch_release.lua`` checks again: a block that renewed since is kept); the block, if
alive after all, is refused at its next add or exit (``HoldLapsed``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Set
from typing import Final

from cogworker_async.enqueue.lookup import JobLookup
from cogworker_async.errors import why
from cogworker_async.redis.errors import ResponseError
from cogworker_async.redis.part import wrong_type
from cogworker_async.redis.store import Store
from cogworker_async.workflows import batch

log = logging.getLogger(__name__)

HEX: Final = frozenset("0123456789abcdefABCDEF")
HELD_PER_PASS: Final = 200
"""Held batches one pass looks at (the next pass goes on from there)."""


def leased(token: str) -> bool:
    """Whether a holder token is a block outside a worker, on a lease."""
    nonce, dot, rest = token.partition(".")  # as _batch.lua's batch_lease_ms reads it
    return (bool(nonce) and all(c in HEX for c in nonce) and dot == "."
            and rest[:2] in ("n~", "r~") and rest[2:].isascii() and rest[2:].isdigit())


def owner_of(token: str) -> str | None:
    """The identity a holder token names (None: a block outside a worker)."""
    _, at, owner = token.partition("@")
    return owner if at and owner else None


class BatchReaper:
    def __init__(self, store: Store, identity: str, *, judge_after: float = 0.0) -> None:
        self.store = store
        self.identity = identity
        self.judge_after = judge_after
        """Seconds a process must have been found gone, from the first pass that found
        it so to a later one, before its blocks are let go of (a worker's relay: its
        ``orphan_threshold``; see ``_judge``)."""
        self._missing: dict[str, float] = {}
        """Identity -> when (``time.monotonic()``) a pass first found it gone, since
        found gone by every pass that looked."""
        self._looked: set[str] = set()
        """The identities looked at since the held list's first page (``_judge``)."""
        self._start = 0

    async def reap(self) -> int:
        """One pass: how many blocks were let go of. One batch that fails is logged and
        skipped; the first failure is raised at the end."""
        batches = self.store.batches
        held = await batches.held_page(self._start, HELD_PER_PASS)
        self._start = self._start + len(held) if len(held) == HELD_PER_PASS else 0
        owners = {owner for _, holders, _ in held for token in holders.split()
                  if (owner := owner_of(token)) is not None and owner != self.identity}
        gone = await self._judge(owners)
        on_lease = [bid for bid, holders, _ in held if any(map(leased, holders.split()))]
        leases = await batches.leases(on_lease) if on_lease else {}
        clock = await self.store.dependencies.clock() if on_lease else 0.0
        released, failure, marked = 0, None, []
        for bid, holders, parent in held:
            lapsed = [token for token in holders.split() if leased(token)
                      and leases.get(bid, {}).get(token, 0.0) <= clock]
            tokens = [token for token in holders.split() if self._gone(token, gone)] + lapsed
            if not tokens:
                if not holders.strip():  # held with no holder: marked, to repair
                    marked.append(bid)
                continue
            try:
                state = await batches.release(bid, tokens, parent)
                log.warning("batch %s: let go of %d block(s) whose process died inside "
                            "them or whose hold lapsed (now %s)", bid, len(tokens), state)
                released += len(tokens)
                marked.append(bid)
            except Exception as exc:
                log.error("batch %s: could not let go of the blocks of gone processes: %s",
                          bid, why(exc))
                failure = failure or exc
        for bid in marked:
            try:
                await self._repair(bid)
            except Exception as exc:
                log.error("batch %s: could not repair it after letting go of a dead block "
                          "(the next pass tries again): %s", bid, why(exc))
                failure = failure or exc
        if failure is not None:
            raise failure
        return released

    async def _judge(self, owners: Set[str]) -> set[str]:
        """Of ``owners``, the processes gone for good. Found gone (no alive marker, no
        last beat) is not enough: Redis restarted without persistence (or a failover
        lost writes) loses both of a live process until its next beat re-registers it
        (``beat.lua``), and a block it opens meanwhile would be let go of while it runs.
        A live process beats within ``orphan_threshold`` (its marker's TTL): found gone
        by every pass over that long, it is dead (recovery forgot it) or stopped."""
        found = await self.store.batches.gone(sorted(owners)) if owners else set()
        now = time.monotonic()
        if self._start == 0:  # the list's last page: forget who was not looked at since
            self._missing = {owner: since for owner, since in self._missing.items()
                             if owner in self._looked or owner in owners}
            self._looked = set()
        self._looked |= owners
        for owner in owners - found:  # alive (again): a new run of passes from here
            self._missing.pop(owner, None)
        return {owner for owner in found
                if now - self._missing.setdefault(owner, now) >= self.judge_after}

    def _gone(self, token: str, gone: set[str]) -> bool:
        owner = owner_of(token)
        if owner is None:
            return False
        if owner == self.identity:
            return token not in batch.LIVE_HOLDERS
        return owner in gone

    async def _repair(self, bid: str) -> None:
        """A batch let go of a dead block of (``batch_release.lua`` marked it
        ``orphans``), repaired once no block holds it — no live block can then be between
        joining a member and pushing it. Abandoned: its pending members will not run
        (the recovered run enqueues its own): each is cancelled. Otherwise (sealed): a
        member the dead block joined but never pushed — no record — counts cancelled, or
        the batch would wait for it for good (found by the model:
        model/traces/add_window.txt); the members pushed are left to run. Only then
        does the mark go (``batch_repair.lua``, refused if the batch changed meanwhile):
        a relay that dies halfway leaves it for the next pass, which does it again."""
        batches = self.store.batches
        try:
            state, holders, mark = await batches.marked(bid)
        except ResponseError as exc:
            if wrong_type(exc):
                return  # a damaged hash: skipped, as held_page shows it (no holder)
            raise
        if state is not None and holders.strip():
            return  # held again: repaired once it is let go of
        lookup, never_pushed = JobLookup(lambda: self.store), []
        if state is not None and mark:
            for jid in await batches.members(bid, "pending"):
                if state == "abandoned":
                    if await lookup.cancel(jid) == "unknown":
                        never_pushed.append(jid)
                elif (await lookup.status(jid)).state == "unknown":
                    never_pushed.append(jid)
        done = await batches.repair(bid, mark, state or "", never_pushed)
        if never_pushed and done != "retry":
            log.warning("batch %s: %d member(s) joined by a block that died before "
                        "pushing them count cancelled", bid, len(never_pushed))
