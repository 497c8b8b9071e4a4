"""The outbox relay (``outbox/__init__.py``): rows the application wrote in its own transactions,
pushed to Redis and deleted, each exactly once.

One pass, in one database transaction: take up to ``batch`` rows, oldest first (``FOR
UPDATE SKIP LOCKED`` where the database has it, so that relays in several processes
share the rows, never push one row at once), push each with its own jid as a once-only
enqueue (``lua/enqueue.lua``: a jid ever enqueued is refused, the row is then done
anyway), delete them, commit. Crash windows: dead before the push, the row is taken
again; dead between the push and the commit of the delete, the row is taken again, its
push refused as a duplicate, and deleted — one job either way. Once the delete has
committed, the jid's once marker is kept only ``ONCE_KEPT`` more seconds (or 10 relay
intervals): what the job leaves in Redis is then its record, bounded by ``keep_status``
(a relay that dies between the commit and that EXPIRE leaves the marker to its TTL, 14
days). Not dropped at once: without ``SKIP LOCKED`` (SQLite) another relay may have
read the row before the commit and push it after; the marker refuses that push, and a
relay pushes no row it read longer ago than half that time (left for its next pass).

Whose rows: those of this App's namespace (or of none: rows from before the column)
that name a job its App registers. A row of its namespace naming another job is left
for a relay that knows it, and said in the log: pushed, it would be filed dead as
unknown by every worker that knows only this App's jobs.

A row Redis refuses (a key of another type on its queue, a permission) is marked —
``attempts``, ``error``, ``retry_at`` — and not taken again before ``retry_at`` (backing
off to ``MAX_BACKOFF``): the passes read past it, so no number of refused rows holds up
the others. Redis out of reach ends the pass instead; the rows wait unmarked.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import anyio
from sqlalchemy import ColumnElement, Table, delete, func, or_, select, true, update

from cogworker_async.errors import why
from cogworker_async.redis.errors import ClusterUnreachable, ConnectionLost, NoMaster
from cogworker_async.redis.store import Store
from cogworker_async.worker.streak import Streak

if TYPE_CHECKING:
    from cogworker_async.outbox import Outbox

log = logging.getLogger(__name__)

MAX_BACKOFF: Final = 60.0
"""Seconds a refused row waits at most before it is pushed again (1, 2, 4, ... s)."""
UNKNOWN_EVERY: Final = 10.0
"""Seconds between two looks for rows of this namespace naming jobs it does not know."""
ONCE_KEPT: Final = 60.0
"""Seconds at least (10 relay intervals if longer) a relayed row's once marker is kept
after its delete committed: a relay that read the row before (no row locks: SQLite) and
pushes it now is refused. A pass pushes no row it read longer ago than half of it."""
AWAY: Final = (*ConnectionLost, ClusterUnreachable, NoMaster)
"""Redis out of reach: the pass ends, and the rows are not held against it."""


@dataclass(slots=True)
class Backlog:
    """This relay's rows not yet relayed, at the last look: how many, how long the
    oldest has waited (0 when none), how many of them Redis refused at least once, and
    rows of this namespace naming jobs this App does not register (left for others)."""

    rows: int = 0
    lag: float = 0.0
    refused: int = 0
    unknown: int = 0


def mine(table: Table, namespace: str) -> ColumnElement[bool]:
    """Rows of the App's namespace (or of none: written before the column)."""
    return or_(table.c.namespace == namespace, table.c.namespace.is_(None))


def known(table: Table, names: Collection[str] | None) -> ColumnElement[bool]:
    """Rows naming a job of ``names`` (or no name yet: looked at in the pass)."""
    if names is None:
        return true()
    return or_(table.c.name.in_(sorted(names)), table.c.name.is_(None))


async def demand(outbox: Outbox, namespace: str, names: Collection[str] | None
                 ) -> dict[str, int]:
    """Rows a relay of the App would push, by queue: what ``cogworker_queue_demand``
    adds to each queue's (``prometheus/system.py``), so that rows committed while no
    worker runs start one (scale to zero). Rows Redis refused are not in it: one refused
    for good would keep a worker up for ever (``Backlog.refused`` says them)."""
    table = outbox.table
    async with outbox.engine.connect() as conn:
        found = (await conn.execute(
            select(table.c.queue, func.count()).where(
                mine(table, namespace), known(table, names), table.c.attempts.is_(None))
            .group_by(table.c.queue))).all()
    return {str(queue): int(count) for queue, count in found}


def backoff(attempts: int) -> float:
    """Seconds a row waits after its ``attempts``-th refusal."""
    return float(min(MAX_BACKOFF, 2.0 ** min(max(attempts - 1, 0), 16)))


class OutboxRelay:
    def __init__(self, outbox: Outbox, store: Store, names: Collection[str] | None = None
                 ) -> None:
        """``names``: the jobs this relay's App registers (only rows naming one are
        taken); None: any job (a tool's relay, a test)."""
        self.outbox = outbox
        self.store = store
        self.names = frozenset(names) if names is not None else None
        self.namespace = store.keys.namespace
        self.backlog = Backlog()
        self.relayed = 0
        """Rows pushed (or found pushed already) and deleted, since this relay started."""
        self._streak = Streak("relaying the outbox")
        self._rows = Streak("pushing outbox rows")
        self._upgraded = False
        self._unknown_at = 0.0
        """``time.monotonic()`` of the last look for unknown rows."""
        self._read_at = 0.0
        """``time.monotonic()`` when this pass read its rows."""

    @property
    def once_kept(self) -> float:
        """Seconds a relayed row's once marker is kept after its delete committed."""
        return max(ONCE_KEPT, 10 * self.outbox.interval)

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

    def _mine(self) -> ColumnElement[bool]:
        return mine(self.outbox.table, self.namespace)

    def _known(self) -> ColumnElement[bool]:
        return known(self.outbox.table, self.names)

    async def relay_once(self) -> int:
        """One pass: the rows relayed. A row whose push Redis refuses is marked and left
        until its ``retry_at`` (logged, then less and less often), and the pass goes on
        with the others. Redis out of reach ends the pass: its error is raised, once
        what was pushed before it is deleted."""
        if not self._upgraded:  # a table made by an earlier version: its new columns
            added = await self._upgrade()
            if added:
                log.warning("outbox: the table %s had no column %s: added",
                            self.outbox.table.name, ", ".join(added))
            self._upgraded = True
        table = self.outbox.table
        now = time.time()
        async with self.outbox.engine.begin() as conn:
            rows = (await conn.execute(
                select(table.c.id, table.c.jid, table.c.queue, table.c.job, table.c.name,
                       table.c.attempts)
                .where(self._mine(), self._known(),
                       or_(table.c.retry_at.is_(None), table.c.retry_at <= now))
                .order_by(table.c.id).limit(self.outbox.batch)
                .with_for_update(skip_locked=True))).all()
            self._read_at = time.monotonic()
            pushed, failure = await self._push(conn, rows, now)
            done = [row.id for row in pushed]
            if done:
                await conn.execute(delete(table).where(table.c.id.in_(done)))
        await self._keep_markers([(row.queue, row.jid) for row in pushed])
        if failure is not None:
            self._rows.failed(failure)
            if not done:
                raise failure
        elif done:
            self._rows.succeeded()
        self.relayed += len(done)
        return len(done)

    async def _push(self, conn: Any, rows: Sequence[Any], now: float
                    ) -> tuple[list[Any], BaseException | None]:
        """Push ``rows`` in order: those pushed (or found pushed already), and Redis'
        error if it went out of reach (the rows after it are not tried). Rows read too
        long ago (``ONCE_KEPT``) are left for the next pass: their markers, if another
        relay pushed them, may be about to go."""
        pushed: list[Any] = []
        for index, row in enumerate(rows):
            if time.monotonic() - self._read_at > self.once_kept / 2:
                log.warning("outbox: %d rows were read %.0fs ago: left for the next pass",
                            len(rows) - index, time.monotonic() - self._read_at)
                break
            if row.name is None and not await self._named(conn, row):
                continue
            try:
                count = await self.store.enqueue(row.queue, [bytes(row.job)],
                                                 jids=[row.jid], chosen="once")
            except AWAY as exc:  # every push would fail: the rows wait, unmarked
                return pushed, exc
            except Exception as exc:  # this row refused: marked, the others go on
                await self._refused(conn, row, exc, now)
                continue
            if count < 0:  # pushed by an earlier pass that died before its delete
                log.info("outbox: jid=%s (queue %r) was pushed already: its row goes",
                         row.jid, row.queue)
            pushed.append(row)
        return pushed, None

    async def _upgrade(self) -> list[str]:
        from cogworker_async.outbox import upgrade

        return await upgrade(self.outbox.engine, self.outbox.table)

    async def _named(self, conn: Any, row: Any) -> bool:
        """A row written before the ``name`` column: its job's name, read from the job
        and written down (the passes then filter it as any row). False if this App does
        not register it (left for a relay that does)."""
        try:
            name = json.loads(bytes(row.job)).get("class")
        except (ValueError, AttributeError):
            name = None
        name = name if isinstance(name, str) else "?"
        table = self.outbox.table
        await conn.execute(update(table).where(table.c.id == row.id).values(name=name))
        if self.names is None or name in self.names:
            return True
        log.warning("outbox: jid=%s names job %r, which this App does not register: left "
                    "for a relay whose App does", row.jid, name)
        return False

    async def _refused(self, conn: Any, row: Any, exc: Exception, now: float) -> None:
        """Redis refused ``row``'s push: counted, said, and not taken before its retry."""
        from cogworker_async.outbox import MAX_ERROR

        attempts = (row.attempts or 0) + 1
        wait = backoff(attempts)
        table = self.outbox.table
        await conn.execute(update(table).where(table.c.id == row.id).values(
            attempts=attempts, error=why(exc)[:MAX_ERROR], retry_at=now + wait))
        if attempts & (attempts - 1) == 0:  # the 1st, 2nd, 4th, 8th...: not a flood
            log.warning("outbox: Redis refused jid=%s (queue %r, %d times): %s; the row "
                        "waits %.0fs, the others go on", row.jid, row.queue, attempts,
                        why(exc), wait)

    async def _keep_markers(self, pushed: list[tuple[str, str]]) -> None:
        """The rows of ``pushed`` are deleted: their once markers are kept ``once_kept``
        more seconds (a relay that read a row before the delete may push it still), not
        14 days whatever the job's ``keep_status``. Left to their TTL if Redis is away."""
        try:
            await self.store.moves.keep_once(pushed, self.once_kept)
        except Exception as exc:
            log.debug("outbox: %d once markers left to their TTL (%s)", len(pushed), why(exc))

    async def measure(self) -> Backlog:
        """How many of this relay's rows wait, the oldest's age, how many were refused;
        and now and then, rows of its namespace naming jobs it does not know (logged)."""
        table = self.outbox.table
        c = table.c
        async with self.outbox.engine.connect() as conn:
            count, oldest, refused = (await conn.execute(
                select(func.count(), func.min(c.created_at), func.count(c.attempts))
                .select_from(table).where(self._mine(), self._known()))).one()
            unknown = self.backlog.unknown
            if self.names is not None and time.monotonic() - self._unknown_at > UNKNOWN_EVERY:
                self._unknown_at = time.monotonic()
                unknown = await self._unknown(conn)
        self.backlog = Backlog(int(count), max(0.0, time.time() - oldest) if oldest else 0.0,
                               int(refused), unknown)
        return self.backlog

    async def _unknown(self, conn: Any) -> int:
        """Rows of this namespace naming jobs this App does not register, said in the log
        when their number changes."""
        c = self.outbox.table.c
        found = (await conn.execute(
            select(c.name, func.count()).where(c.namespace == self.namespace,
                                                c.name.not_in(sorted(self.names or ())))
            .group_by(c.name).order_by(c.name))).all()
        unknown = sum(int(n) for _, n in found)
        if unknown and unknown != self.backlog.unknown:
            log.warning("outbox: %d rows of namespace %r name jobs this App does not "
                        "register (%s): no relay of it takes them; a relay whose App "
                        "registers them will", unknown, self.namespace,
                        ", ".join(f"{name!r}: {n}" for name, n in found[:10]))
        return unknown
