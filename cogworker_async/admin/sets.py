"""The sorted sets of jobs (schedule, retry, dead) as an admin sees them: pages, search,
and the actions retry (onto its queue now), delete and kill (to dead), one by one or on
the whole set.

Every read is bounded (a page, a window, one scan budget). Moves go through the
worker's scripts: a job is written to its destination before it leaves its source.

Each queue has its own schedule, retry and dead set (in its hash slot); a ``JobSet`` is
all the queues' sets of one kind, seen as one: counted, paged and searched together.
Each record carries the queue whose set holds it (``JobRecord.home``), and every action
on it goes there: a retried job goes back on that queue, a killed one into its dead set.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from cogworker_async.admin.records import (
    PAGE_SIZE,
    Done,
    Found,
    JobRecord,
    Page,
    digest,
    glob_pattern,
    page_bounds,
    split_token,
)
from cogworker_async.jobs import retries, unique, wire
from cogworker_async.redis.admin import Admin, SetEntry
from cogworker_async.redis.errors import RedisError
from cogworker_async.redis.store import SetName

if TYPE_CHECKING:
    from cogworker_async.admin.base import InspectorView

SEARCH_LIMIT: Final = 100
"""Matches one search returns at most."""
SEARCH_BUDGET: Final = 100_000
"""Entries one search looks at before it stops and says so (ZSCAN steps of 1,000)."""
SCAN_STEP: Final = 1000
"""Entries one ZSCAN step of a search asks for."""
BULK_BATCH: Final = 500
"""Entries one bulk action moves per round trip."""
FIND_BATCH: Final = 1000
"""Entries sharing one score read per round trip while a token is looked for (at most
``SEARCH_BUDGET`` of them: one past that is reported gone)."""
CROSS_QUEUE_READS: Final = 100_000
"""Record reads a retry from dead may make to look for its jids alive in other queues."""


class JobSet:
    """A sorted set of jobs (schedule, retry or dead): pages, search, and the actions
    retry (onto its queue now), delete and kill (to dead), one by one or on all."""

    target: SetName
    newest_first = False

    def __init__(self, inspector: InspectorView) -> None:
        self._inspector = inspector

    async def size(self) -> int:
        return await self._inspector.admin().set_size(self.target)

    async def page(self, number: int = 1, size: int = PAGE_SIZE) -> Page[JobRecord]:
        """Page ``number`` of every queue's set merged (by score, or newest first)."""
        start, stop, size = page_bounds(number, size)
        admin = self._inspector.admin()
        total = await admin.set_size(self.target)
        window = await admin.set_window(self.target, start, stop, newest_first=self.newest_first)
        return Page([_record(entry) for entry in window], number, size, total)

    async def search(self, term: str, limit: int = SEARCH_LIMIT) -> Found:
        """Entries whose JSON contains ``term`` (class, args, error; ASCII case ignored),
        in every queue's set.

        The scan's cursor is compound: a queue (walked in name order) and the ZSCAN
        cursor within its set, which is done when that comes back 0. The budget and
        the limit count over all the queues."""
        if not isinstance(term, str) or not term.strip():
            raise ValueError("a search needs a non-empty term")
        admin = self._inspector.admin()
        pattern, looked, complete = glob_pattern(term.strip()), 0, True
        found: list[JobRecord] = []
        for queue in await admin.set_queues():
            if len(found) >= limit or looked >= SEARCH_BUDGET:
                complete = False
                break
            finished, looked = await self._scan(admin, queue, pattern, found, looked, limit)
            if not finished:
                complete = False
                break
        found.sort(key=lambda r: r.score or 0.0, reverse=self.newest_first)
        return Found(found[:limit], complete and len(found) <= limit)

    async def _scan(self, admin: Admin, queue: str, pattern: str, found: list[JobRecord],
                    looked: int, limit: int) -> tuple[bool, int]:
        """Scan ``queue``'s set into ``found``: (scanned to its end?, entries looked at)."""
        cursor = 0
        while True:
            cursor, matches = await admin.set_scan(self.target, queue, pattern, cursor,
                                                   SCAN_STEP)
            found += [_record(entry) for entry in matches]
            looked += SCAN_STEP
            if cursor == 0:
                return True, looked
            if len(found) >= limit or looked >= SEARCH_BUDGET:
                return False, looked

    async def find(self, token: str) -> JobRecord | None:
        """The entry a token names, in whichever queue's set holds it (None: gone)."""
        where, hashed = split_token(token)
        try:
            score = float(where)
        except ValueError:
            raise ValueError(f"not a {self.target} entry token: {token!r}") from None
        if math.isnan(score):  # no entry has it, and Redis refuses it as a bound
            raise ValueError(f"not a {self.target} entry token: {token!r}")
        # Many entries may share a score (a batch scheduled for one time): read them a
        # batch at a time, never all at once, and look at a bounded number of them.
        # Every queue's first batch in one round trip; then only the queues that filled
        # theirs, from where they left off.
        admin = self._inspector.admin()
        queues: list[str] | None = None
        for start in range(0, SEARCH_BUDGET, FIND_BATCH):
            batches = await admin.set_at_score(self.target, score, start, FIND_BATCH, queues)
            for queue, batch in batches.items():
                for raw in batch:
                    if digest(raw) == hashed:
                        return JobRecord.read(raw, score=score, home=queue)
            queues = [queue for queue, batch in batches.items() if len(batch) == FIND_BATCH]
            if not queues:
                break
        return None

    async def _found(self, tokens: Iterable[str]) -> tuple[list[JobRecord], int]:
        records, missing = [], 0
        for token in dict.fromkeys(tokens):  # named twice is the same entry
            record = await self.find(token)
            if record is None:
                missing += 1
            else:
                records.append(record)
        return records, missing

    # -- actions -------------------------------------------------------------------

    async def delete(self, tokens: Iterable[str]) -> Done:
        records, missing = await self._found(tokens)
        admin = self._inspector.admin()
        removed = await admin.set_remove(self.target, [r.raw for r in records],
                                         [r.home for r in records])
        for record in itertools.compress(records, removed):
            await release_lock(admin, record)
        return Done(sum(removed), missing + len(records) - sum(removed))

    async def retry(self, tokens: Iterable[str]) -> Done:
        """Put entries on their queues now (``enqueue now`` for scheduled jobs)."""
        records, missing = await self._found(tokens)
        result = await self._to_queues(records)
        return Done(result.done, missing + result.missing, result.refused)

    async def kill(self, tokens: Iterable[str]) -> Done:
        """Move entries to dead (they will not run unless someone retries them there)."""
        records, missing = await self._found(tokens)
        return await self._kill(records, missing)

    async def delete_all(self) -> int:
        return await self._inspector.admin().set_clear(self.target)

    async def retry_all(self) -> Done:
        return await self._each_batch(self._to_queues)

    async def kill_all(self) -> Done:
        return await self._each_batch(lambda records: self._kill(records, 0))

    async def _each_batch(self, act: Any) -> Done:
        """Apply ``act`` to the whole set, a batch at a time. Entries it leaves behind
        (refused, or unwritable) are stepped over, so that the loop always ends.

        A retried job that fails again meanwhile is back in the set (new bytes, same
        jid), often ahead of entries not reached yet: stepped over too, or one click
        would run it again and again. And no more entries are acted on than the set
        held when asked, so the loop ends even while workers keep filling the set."""
        admin = self._inspector.admin()
        total, skip, refused, seen = 0, 0, list[str](), set[str]()
        budget = await admin.set_size(self.target)
        while budget > 0:
            window = await admin.set_window(self.target, skip, skip + BULK_BATCH - 1,
                                            newest_first=False)
            if not window:
                break
            records = [_record(entry) for entry in window]
            fresh = [r for r in records if r.jid is None or r.jid not in seen][:budget]
            seen.update(r.jid for r in fresh if r.jid is not None)
            result: Done = await act(fresh)
            total += result.done
            refused += result.refused
            skip += len(window) - result.done - result.missing
            budget -= len(fresh)
        return Done(total, 0, refused)

    async def _to_queues(self, records: Sequence[JobRecord]) -> Done:
        items, sent, refused = [], [], []
        now = time.time()
        for record in records:
            if not record.runnable or record.payload is None:
                refused.append(f"{record.token}: not a runnable job (its bytes stay here)")
                continue
            # A copy of the job it is (runnable: its jid and class are strings), put on
            # the queue whose set holds it (``promote`` pushes within that slot): its
            # ``queue`` field is made to say so, as for any job a client pushes.
            payload = cast(wire.Payload, dict(record.payload))
            queue = _home(record, self._inspector.default_queue)
            payload["queue"], payload["enqueued_at"] = queue, now
            self._before_retry(payload)
            items.append((record.raw, wire.encode(payload, wire.NO_SIZE_LIMIT), queue))
            sent.append(record)
        if self.target == "dead":
            items, sent, refused = await self._not_alive(items, sent, refused)
        locked = [r for r in sent if await _take_lock(self._inspector.admin(), r)]
        moved = await self._inspector.admin().set_to_queues(self.target, items)
        stuck = await self._left_behind(sent) if moved < len(items) else []
        for record in locked:
            if any(reason.startswith(record.token) for reason in stuck):
                await release_lock(self._inspector.admin(), record)
        return Done(moved, len(items) - moved - len(stuck), refused + stuck)

    async def _not_alive(
        self, items: list[tuple[bytes, bytes, str]], sent: list[JobRecord],
        refused: list[str],
    ) -> tuple[list[tuple[bytes, bytes, str]], list[JobRecord], list[str]]:
        """Dead entries whose jid is alive again in another queue stay dead (``promote``
        checks the entry's own queue, atomically): a second live copy of a jid would
        make ``cancel(jid)`` stop one and leave the other to run. One record read per
        (entry, queue), pipelined; past ``CROSS_QUEUE_READS`` reads (thousands of queues
        times thousands of entries), only the own queue is checked."""
        admin = self._inspector.admin()
        queues = await admin.store.queue_names()
        if not sent or len(sent) * len(queues) > CROSS_QUEUE_READS:
            return items, sent, refused
        kept_items, kept = [], []
        for item, record in zip(items, sent, strict=True):
            others = [queue for queue in queues if queue != item[2]]
            where = await admin.store.alive_in(str(record.jid), others) if others else []
            if where:
                refused.append(f"{record.token}: its jid is alive again in queue "
                               f"{where[0]!r}: retrying this copy would run it twice "
                               "(the entry stays here)")
            else:
                kept_items.append(item)
                kept.append(record)
        return kept_items, kept, refused

    async def _left_behind(self, sent: Sequence[JobRecord]) -> list[str]:
        """Why entries ``promote`` left in the set are still there. It skips a member
        that is gone (it ran, another process moved it) and leaves in place one whose
        queue key cannot be written (another type): counted as gone, that one would not
        be stepped over, and ``retry_all`` would try it again forever."""
        admin = self._inspector.admin()
        still = await admin.set_contains(self.target, [r.raw for r in sent],
                                         [r.home for r in sent])
        reasons = []
        for record, there in zip(sent, still, strict=True):
            if not there:
                continue
            if self.target == "dead" and record.home is not None and \
                    await admin.store.alive_in(str(record.jid), [record.home]):
                reasons.append(f"{record.token}: its jid is alive again (queued, scheduled, "
                               "running or retrying): retrying this copy would run it twice "
                               "(the entry stays here)")
            else:
                reasons.append(f"{record.token}: its queue cannot be written (the key holds "
                               "another type, or Redis is out of memory); the entry stays "
                               "here")
        return reasons

    def _before_retry(self, payload: wire.Payload) -> None:
        retries.for_manual_retry(payload)  # a person's retry does not use up an attempt

    async def _kill(self, records: Sequence[JobRecord], missing: int) -> Done:
        admin, done = self._inspector.admin(), 0
        for record in records:
            if await admin.set_move(self.target, "dead", record.raw, record.raw, record.home):
                await release_lock(admin, record)
                done += 1
            else:
                missing += 1
        return Done(done, missing)


async def _take_lock(admin: Admin, record: JobRecord) -> bool:
    """A unique job put back on its queue by hand holds its lock again, as an enqueue
    would: the lock was released when it died, and without it the same job enqueued
    meanwhile would run beside it. Taken only if free (another jid holding it is
    another copy already waiting; the user asked for this one all the same). Best
    effort, with the job's TTL."""
    payload = record.payload or {}
    digest = wire.text(payload, "unique_digest")
    if digest is None or record.jid is None:
        return False
    stored = wire.number(payload, "unique_ttl")
    seconds = stored if stored is not None and stored > 0 else unique.DEFAULT_TTL
    try:
        return await admin.take_unique(digest, record.jid, seconds, _lock_queue(record))
    except RedisError:
        return False


async def release_lock(admin: Admin, record: JobRecord) -> None:
    """A job an admin deleted or moved to dead will not run: the unique lock it owns is
    released, as when a worker files a job in dead. Kept, it would refuse the same job's
    next enqueue (as a duplicate of nothing) until it expired: over a retry's delay,
    which it was extended to cover, hours or days. Best effort: the lock has a TTL."""
    digest = wire.text(record.payload or {}, "unique_digest")
    if digest is not None and record.jid is not None:
        with contextlib.suppress(RedisError):
            await admin.release_unique(digest, record.jid, _lock_queue(record))


def _record(entry: SetEntry) -> JobRecord:
    return JobRecord.read(entry.member, score=entry.score, home=entry.queue)


def _home(record: JobRecord, fallback: str) -> str:
    """The queue an entry goes back on: the one whose set holds it (its record says,
    once read from a set), else its ``queue`` field, else ``fallback``."""
    return record.home if record.home is not None else wire.queue_of(record.payload, fallback)


def _lock_queue(record: JobRecord) -> str:
    """The queue whose slot holds a job's unique lock: the queue it was enqueued on (the
    lock's digest covers it), which holds the job too."""
    return _home(record, "default")


class ScheduledSet(JobSet):
    """Jobs enqueued to run later, soonest first. ``retry`` = enqueue now."""

    target: SetName = "schedule"

    def _before_retry(self, payload: wire.Payload) -> None:
        return None  # a scheduled job has not failed: nothing to give back


class RetrySet(JobSet):
    """Failed jobs waiting for their next attempt, soonest first."""

    target: SetName = "retry"


class DeadSet(JobSet):
    """Jobs that will not run again unless retried here, newest first."""

    target: SetName = "dead"
    newest_first = True

    async def kill(self, tokens: Iterable[str]) -> Done:
        records, missing = await self._found(tokens)
        return Done(0, missing, [f"{r.token}: already dead" for r in records])

    async def kill_all(self) -> Done:
        return Done()

