"""The outbox relay (``outbox.py``): rows the application wrote in its own transactions,
pushed to Redis and deleted, each exactly once.

One pass, in one database transaction: take up to ``batch`` rows, oldest first (``FOR
UPDATE SKIP LOCKED`` where the database has it, so that relays in several processes
share the rows, never push one row at once), push each with its own jid as a once-only
enqueue (``lua/enqueue.lua``: a jid ever enqueued is refused, the row is then done
anyway), delete them, commit. Crash windows: dead before the push, the row is taken
again; dead between the push and the commit of the delete, the row is taken again, its
push refused as a duplicate, and deleted — one job either way. A jid's once marker lasts
the records' bound (14 days): a relay down longer than that may push a row a second time.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from sqlalchemy import delete, func, select

from cogworker_async.redis.store import Store
from cogworker_async.worker.streak import Streak

if TYPE_CHECKING:
    from cogworker_async.outbox import Outbox

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Backlog:
    """The outbox's rows not yet relayed, at the last look: how many, and how long the
    oldest has waited (0 when none)."""

    rows: int = 0
    lag: float = 0.0


class OutboxRelay:
    def __init__(self, outbox: Outbox, store: Store) -> None:
        self.outbox = outbox
        self.store = store
        self.backlog = Backlog()
        self.relayed = 0
        """Rows pushed (or found pushed already) and deleted, since this relay started."""
        self._streak = Streak("relaying the outbox")

    async def run(self) -> None:
        """Relay until cancelled: passes back to back while they find full batches, then
        one every ``interval``. An error (the database or Redis away) is logged once per
        outage and the pass tried again: the rows wait, none is lost."""
        while True:
            try:
                moved = await self.relay_once()
                await self.measure()
            except Exception as exc:  # the database or Redis away: the rows wait
                self._streak.failed(exc)
                moved = 0
            else:
                self._streak.succeeded()
            if moved < self.outbox.batch:
                await anyio.sleep(self.outbox.interval)

    async def relay_once(self) -> int:
        """One pass: the rows relayed."""
        table = self.outbox.table
        async with self.outbox.engine.begin() as conn:
            rows = (await conn.execute(
                select(table.c.id, table.c.jid, table.c.queue, table.c.job)
                .order_by(table.c.id).limit(self.outbox.batch)
                .with_for_update(skip_locked=True))).all()
            for row in rows:
                # -1: the jid was pushed before (this row's earlier pass died before its
                # delete committed): refused, nothing written; the row is done all the same
                await self.store.enqueue(row.queue, [bytes(row.job)], jids=[row.jid],
                                         chosen="once")
            if rows:
                await conn.execute(delete(table).where(table.c.id.in_([r.id for r in rows])))
        self.relayed += len(rows)
        return len(rows)

    async def measure(self) -> Backlog:
        """How many rows wait, and the oldest's age: the relay's backlog and lag."""
        table = self.outbox.table
        async with self.outbox.engine.connect() as conn:
            count, oldest = (await conn.execute(
                select(func.count(), func.min(table.c.created_at)).select_from(table))).one()
        self.backlog = Backlog(int(count), max(0.0, time.time() - oldest) if oldest else 0.0)
        return self.backlog
