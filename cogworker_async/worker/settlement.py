"""Settlement: applying a job's disposition in Redis, and remembering what could not be.

Every settle script is idempotent (an LPOS guard, or LREM), so a settle is retried a few
times on a connection error. If it still fails, the outcome is remembered in the
Manager's ``pending`` map (``raw -> Ack | File``) and never mistaken for a job to run
again: on shutdown a pending ack is dropped from the in-progress list (that is its ack).
"""

from __future__ import annotations

import logging
from typing import Final

import anyio

from cogworker_async import job
from cogworker_async.redis.store import RedisError, Store
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.outcome import Ack, Disposition, File, GiveBack

log = logging.getLogger("cogworker_async")

ATTEMPTS: Final = 3
RETRY_PAUSE: Final = 0.1
"""Seconds before the second attempt; the third waits twice as long."""

MAX_ENTRY_BYTES: Final = 64 * 1024 * 1024
"""A dead or retry entry is never refused for size: the job already ran."""

Pending = Ack | File


class Settler:
    def __init__(
        self, store: Store, identity: str, *, reliable: bool, pending: dict[bytes, Pending]
    ) -> None:
        self.store = store
        self.identity = identity
        self.reliable = reliable
        self.pending = pending

    async def settle(self, work: Work, disposition: Disposition) -> None:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                await self.apply(work, disposition)
                return
            except RedisError as exc:
                if attempt == ATTEMPTS:
                    self._remember(work, disposition, exc)
                    return
                await anyio.sleep(RETRY_PAUSE * attempt)

    async def apply(self, work: Work, disposition: Disposition) -> None:
        store, identity = self.store, self.identity
        if isinstance(disposition, Ack):
            if self.reliable:
                await store.ack(identity, [(work.raw, job.jid_of(work.raw))])
        elif isinstance(disposition, File):
            entry = job.encode(disposition.entry, MAX_ENTRY_BYTES)
            if self.reliable:
                await store.file_failure(identity, work.raw, disposition.target, entry,
                                         disposition.delay)
            else:
                await store.file_entry(disposition.target, entry, disposition.delay)
        elif self.reliable:
            await store.give_back(identity, work.queue, work.raw)
        else:
            await store.push_back(work.queue, work.raw)

    def _remember(self, work: Work, disposition: Disposition, exc: Exception) -> None:
        jid = job.jid_of(work.raw)
        if isinstance(disposition, GiveBack):
            # Still on the in-progress list: requeued with the rest at shutdown.
            log.error("couldn't give back jid=%s (left in progress): %r", jid, exc)
            return
        if not self.reliable:
            log.error("couldn't settle jid=%s (basic fetch: outcome lost): %r", jid, exc)
            return
        self.pending[work.raw] = disposition
        log.error("couldn't settle jid=%s, will retry (it is not run again): %r", jid, exc)
