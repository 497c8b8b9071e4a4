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
        self._rows = Streak("pushing outbox rows")

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
        """One pass: the rows relayed. A row whose push raises is left for the next
        pass (logged once per outage) and the pass goes on with the others: one row
        Redis refuses (a permission, a key of another type on its queue) holds up no
        other. If every push fails (Redis away), the first error is raised."""
        table = self.outbox.table
        async with self.outbox.engine.begin() as conn:
            rows = (await conn.execute(
                select(table.c.id, table.c.jid, table.c.queue, table.c.job)
                .order_by(table.c.id).limit(self.outbox.batch)
                .with_for_update(skip_locked=True))).all()
            done: list[int] = []
            failure: Exception | None = None
            for row in rows:
                try:
                    pushed = await self.store.enqueue(row.queue, [bytes(row.job)],
                                                      jids=[row.jid], chosen="once")
                except Exception as exc:
                    failure = failure or exc
                    self._rows.failed(exc)
                    continue
                if pushed < 0:  # pushed by an earlier pass that died before its delete
                    log.info("outbox: jid=%s (queue %r) was pushed already: its row goes",
                             row.jid, row.queue)
                done.append(row.id)
            if done:
                await conn.execute(delete(table).where(table.c.id.in_(done)))
        if rows and not done and failure is not None:
            raise failure
        if done:
            self._rows.succeeded()
        self.relayed += len(done)
        return len(done)

    async def measure(self) -> Backlog:
        """How many rows wait, and the oldest's age: the relay's backlog and lag."""
        table = self.outbox.table
        async with self.outbox.engine.connect() as conn:
            count, oldest = (await conn.execute(
                select(func.count(), func.min(table.c.created_at)).select_from(table))).one()
        self.backlog = Backlog(int(count), max(0.0, time.time() - oldest) if oldest else 0.0)
        return self.backlog
