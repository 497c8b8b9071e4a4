"""Reconcile: this process's own in-progress list kept in line with what it is doing.

An entry no processor is running (judged from memory, never from Redis) is either a
pending settlement — finished here, never run again — or a stray (a ghost left by a
lost fetch reply), requeued once seen on two passes in a row (the second look rules out
a job caught between its fetch and its start). Run by ``recovery.run_upkeep``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cogworker_async.errors import why
from cogworker_async.jobs import wire
from cogworker_async.redis.errors import Unavailable, maybe_ran
from cogworker_async.redis.store import Store
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.settlement import Settler

log = logging.getLogger(__name__)


class Reconciler:
    """Keeps this process's own in-progress list in line with what it is doing."""

    def __init__(self, store: Store, settler: Settler, identity: str, queues: Sequence[str],
                 ledger: Ledger) -> None:
        self.store = store
        self.settler = settler
        self.identity = identity
        self.queues = list(dict.fromkeys(queues))
        self.ledger = ledger

    async def settle_pending(self) -> Exception | None:
        """Finish remembered outcomes through the same scripts; stop at the first failure
        and return it (logged at debug only: the caller's streak reports it once)."""
        for raw, disposition in list(self.ledger.pending.items()):
            try:
                await self.settler.apply(Work(self.ledger.queue_of(raw), raw), disposition)
            except Unavailable as exc:
                if maybe_ran(exc):  # a lost reply, or NotDurable (it ran): a 0 from the
                    self.ledger.reply_lost(raw)  # next try is then no sign of a lost list
                log.debug("still couldn't settle jid=%s: %s", wire.jid_of(raw), why(exc))
                return exc
            self.ledger.settled(raw)
            log.info("settled jid=%s late (it was not run again)", wire.jid_of(raw))
        return None

    async def reconcile(self) -> int | None:
        """One pass; returns how many strays were requeued, or None when the pass asked
        Redis nothing (nothing pending, a fetch in flight): it then proves nothing about
        Redis, and must not end a failure streak (an outage would be logged twice).
        Raises what stopped the late settlements, after the strays are handled (they are
        not held up by it)."""
        asked = bool(self.ledger.pending)
        unsettled = await self.settle_pending()
        if self.ledger.fetching:  # a fetch in flight: its jobs are listed but not yet running
            requeued = None
        else:
            requeued = await self._requeue_strays()
        if unsettled is not None:
            raise unsettled
        return 0 if requeued is None and asked else requeued

    async def _requeue_strays(self) -> int:
        listed: dict[bytes, str] = {}
        for queue in self.queues:
            for raw in await self.store.in_progress(self.identity, queue):
                listed[raw] = queue
        requeued = 0
        for raw in self.ledger.strays(list(listed)):
            if await self.store.give_back(self.identity, listed[raw], raw):
                requeued += 1
                log.warning("requeued stray in-progress job jid=%s (a lost fetch reply?)",
                            wire.jid_of(raw))
        return requeued
