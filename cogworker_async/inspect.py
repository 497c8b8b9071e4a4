"""The read/admin model: one class per Redis structure, shared by the dashboard and the
admin CLI (Sidekiq's ``api.rb``).

    insp = Inspector(jobs)
    (await insp.stats.totals()).processed
    page = await insp.dead.page(1)                  # newest first, 25 a page
    await insp.dead.retry([page.items[0].token])    # back on its queue, one more attempt

Every read is bounded (a page, a window, one scan budget): no call loads a whole queue
or set. Entries are named by a ``token`` (their score or position and a digest of their
bytes), so an action finds exactly the entry the user saw, or reports it gone (it ran,
another process moved it) — never touches a different one. Moves go through the
worker's scripts: a job is written to its destination before it leaves its source.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from cogworker_async import job, unique
from cogworker_async.redis.admin import Admin
from cogworker_async.redis.store import RedisError, SetName
from cogworker_async.settings import check_queue_name

if TYPE_CHECKING:
    from cogworker_async.app import App

PAGE_SIZE: Final = 25
MAX_PAGE_SIZE: Final = 500
SEARCH_LIMIT: Final = 100
"""Matches one search returns at most."""
SEARCH_BUDGET: Final = 100_000
"""Entries one search looks at before it stops and says so (ZSCAN steps of 1,000)."""
BULK_BATCH: Final = 500
"""Entries one bulk action moves per round trip."""
FIND_BATCH: Final = 1000
"""Entries sharing one score read per round trip while a token is looked for (at most
``SEARCH_BUDGET`` of them: one past that is reported gone)."""
QUEUE_FIND_WINDOW: Final = 100
"""How far from where the user saw it a queued job is looked for (the queue moves)."""
HISTORY_DAYS: Final = 30
"""Days the history covers unless asked otherwise."""
BURIALS_LOOKED_AT: Final = 200
"""Newest dead entries the Busy view reads to list recent ProcessDied burials."""
MAX_POSITION: Final = 2**62
"""The furthest queue position a token may name (far past any real queue)."""

T = TypeVar("T")


# -- values ---------------------------------------------------------------------------


SERVER_FIELDS: Final = ("server", "version", "used_memory", "used_memory_human",
                        "maxmemory", "connected_clients", "uptime_in_seconds")
"""What ``Inspector.server`` tells (each None when Redis refuses INFO)."""
NO_EVICTION: Final = "noeviction"

# A lone surrogate (U+D800..U+DFFF) is what JSON's "\ud800" escape decodes to: valid
# JSON, not valid Unicode, so UTF-8 output (a page, a terminal, --json) cannot encode
# it and would fail the whole view.
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
REPLACEMENT: Final = "\ufffd"


def printable(text: str) -> str:
    """``text`` with every character UTF-8 cannot encode replaced by U+FFFD: the same
    mark that stored bytes which are not UTF-8 decode to, so a view shows anything a
    job, beat or event holds and says the same thing wherever the text was broken."""
    return _SURROGATE.sub(REPLACEMENT, text)


def eviction_warning(policy: str | None) -> str | None:
    """What to tell an admin about Redis' ``maxmemory-policy`` (None: nothing to say,
    or the policy could not be read)."""
    if policy is None or policy == NO_EVICTION:
        return None
    return (f"Redis' maxmemory-policy is {policy}: when Redis reaches its memory limit it "
            f"can evict keys, and with them queued, scheduled and retrying jobs. Set "
            f"maxmemory-policy to {NO_EVICTION}.")


def digest(raw: bytes) -> str:
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    """One stored job as an admin sees it: the exact bytes and what they say."""

    raw: bytes
    payload: dict[str, Any] | None
    """The decoded JSON object, or None if the bytes are not one."""
    score: float | None = None
    """Its score in a set: when it is due (schedule, retry) or died (dead)."""
    position: int | None = None
    """Its place in a queue: 0 runs next."""

    @property
    def token(self) -> str:
        """Names this entry for an action: where it was seen, and a digest of its bytes."""
        where = repr(self.score) if self.score is not None else str(self.position)
        return f"{where}:{digest(self.raw)}"

    def _get(self, name: str) -> Any:
        return self.payload.get(name) if self.payload is not None else None

    @property
    def jid(self) -> str | None:
        value = self._get("jid")
        return value if isinstance(value, str) else None

    @property
    def name(self) -> str:
        """The job's registered name; ``"?"`` for an entry that is not a job."""
        value = self._get("class")
        return value if isinstance(value, str) else "?"

    @property
    def queue(self) -> str | None:
        value = self._get("queue")
        return value if isinstance(value, str) else None

    @property
    def args(self) -> list[Any]:
        value = self._get("args")
        return value if isinstance(value, list) else []

    @property
    def kwargs(self) -> dict[str, Any]:
        value = self._get("kwargs")
        return value if isinstance(value, dict) else {}

    @property
    def error_class(self) -> str | None:
        value = self._get("error_class")
        return str(value) if value is not None else None

    @property
    def error_message(self) -> str | None:
        value = self._get("error_message")
        return str(value) if value is not None else None

    @property
    def backtrace(self) -> list[str]:
        value = self._get("error_backtrace")
        return [str(line) for line in value] if isinstance(value, list) else []

    @property
    def retry_count(self) -> int | None:
        value = self._get("retry_count")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def stamp(self, name: str) -> float | None:
        """A time field (``enqueued_at``, ``created_at``, ``failed_at``) as epoch s."""
        return _number(self._get(name))

    @property
    def runnable(self) -> bool:
        """Can it be put back on a queue? (an unparseable entry cannot: it would fail
        the same way; its bytes stay in dead for a person to look at). Nor can one
        holding NaN or Infinity, which Python's JSON reads but a job may not carry: it
        could not be encoded again to be pushed."""
        try:
            job.encode(job.decode(self.raw, 2**31), 2**31)
        except Exception:
            return False
        return True

    def display_args(self, limit: int = 200) -> str:
        """Arguments as one line of JSON, cut at ``limit`` characters."""
        if self.payload is None:
            text = self.raw[:limit * 4].decode("utf-8", "replace")
        elif self._get("raw_payload_preview") is not None:
            text = str(self._get("raw_payload_preview"))
        else:
            parts = [json.dumps(arg, ensure_ascii=False) for arg in self.args]
            parts += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in self.kwargs.items()]
            text = ", ".join(parts)
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready description (for ``--json``)."""
        described: dict[str, Any] = {
            "token": self.token, "jid": self.jid, "class": self.name, "queue": self.queue,
            "args": self.args, "kwargs": self.kwargs, "score": self.score,
            "position": self.position, "retry_count": self.retry_count,
            "error_class": self.error_class, "error_message": self.error_message,
            "enqueued_at": self.stamp("enqueued_at"), "failed_at": self.stamp("failed_at"),
        }
        if self.payload is None:
            described["raw_base64"] = base64.b64encode(self.raw).decode("ascii")
        return described

    @classmethod
    def read(cls, raw: bytes, *, score: float | None = None,
             position: int | None = None) -> JobRecord:
        try:
            value = json.loads(raw.decode("utf-8"))  # as the worker reads it (job.decode)
        except Exception:
            value = None
        return cls(raw=raw, payload=value if isinstance(value, dict) else None,
                   score=score, position=position)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    number: int
    size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))


@dataclass(frozen=True, slots=True)
class Found:
    """What a search found: at most ``limit`` matches, and whether it looked at all."""

    items: list[JobRecord]
    complete: bool
    """False if the search stopped early (enough matches, or its budget spent)."""


@dataclass(frozen=True, slots=True)
class Done:
    """What an admin action did: entries acted on, and entries that were gone or could
    not be acted on (with why)."""

    done: int = 0
    missing: int = 0
    refused: list[str] = field(default_factory=list)


def _page_bounds(number: int, size: int) -> tuple[int, int, int]:
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"page numbers start at 1, got {number!r}")
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_PAGE_SIZE:
        raise ValueError(f"page size must be 1..{MAX_PAGE_SIZE}, got {size!r}")
    start = (number - 1) * size
    return start, start + size - 1, size


def _split_token(token: str) -> tuple[str, str]:
    where, sep, hashed = str(token).rpartition(":")
    if not sep or len(hashed) != 16 or not where:
        raise ValueError(f"not an entry token: {token!r}")
    return where, hashed


def glob_pattern(term: str) -> str:
    """A ZSCAN MATCH pattern finding ``term`` anywhere, ignoring ASCII case."""
    out = []
    for char in term:
        if char.isascii() and char.isalpha():
            out.append(f"[{char.lower()}{char.upper()}]")
        elif char in "*?[]\\^-":
            out.append("\\" + char)
        else:
            out.append(char)
    return "*" + "".join(out) + "*"


# -- the structures ---------------------------------------------------------------------


class Stats:
    """Processed and failed totals (what workers have flushed so far)."""

    def __init__(self, inspector: Inspector) -> None:
        self._inspector = inspector

    async def totals(self) -> Totals:
        admin = self._inspector.admin()
        processed, failed = await admin.totals()
        return Totals(processed=processed, failed=failed, at=time.time())

    async def reset(self) -> None:
        await self._inspector.admin().reset_totals()

    async def history(self, days: int = HISTORY_DAYS) -> list[DayTotals]:
        """Processed and failed per day (UTC), the last ``days`` days, oldest first."""
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 366:
            raise ValueError(f"history covers 1..366 days, got {days!r}")
        today = datetime.now(UTC).date()
        names = [(today - timedelta(days=back)).isoformat() for back in range(days - 1, -1, -1)]
        counts = await self._inspector.admin().daily(names)
        return [DayTotals(day, processed, failed)
                for day, (processed, failed) in zip(names, counts, strict=True)]


@dataclass(frozen=True, slots=True)
class DayTotals:
    day: str
    """``YYYY-MM-DD``, UTC."""
    processed: int
    failed: int


@dataclass(frozen=True, slots=True)
class Totals:
    processed: int
    failed: int
    at: float


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    size: int
    latency: float
    """Seconds the oldest job has waited (0 for an empty queue)."""


class Queue:
    """One queue (a list): size, latency, pages of jobs in run order, delete, clear."""

    def __init__(self, inspector: Inspector, name: str) -> None:
        self._inspector = inspector
        self.name = check_queue_name(name)

    async def info(self) -> QueueInfo:
        return (await self._inspector.queues.infos([self.name]))[0]

    async def page(self, number: int = 1, size: int = PAGE_SIZE) -> Page[JobRecord]:
        start, stop, size = _page_bounds(number, size)
        admin = self._inspector.admin()
        total = (await admin.queue_heads([self.name]))[0][0]
        raws = await admin.queue_window(self.name, start, stop)
        items = [JobRecord.read(raw, position=start + i) for i, raw in enumerate(raws)]
        return Page(items, number, size, total)

    @staticmethod
    def _parse(token: str) -> tuple[int, str]:
        where, hashed = _split_token(token)
        try:
            position = int(where)
        except ValueError:
            raise ValueError(f"not a queue entry token: {token!r}") from None
        if not 0 <= position <= MAX_POSITION:  # Redis refuses list indexes past 64 bits
            raise ValueError(f"not a queue entry token: {token!r}")
        return position, hashed

    async def find(self, token: str) -> JobRecord | None:
        """The job a token names, looked for around where it was seen."""
        position, hashed = self._parse(token)
        start = max(0, position - QUEUE_FIND_WINDOW)
        raws = await self._inspector.admin().queue_window(self.name, start,
                                                          position + QUEUE_FIND_WINDOW)
        for raw in raws:
            if digest(raw) == hashed:
                return JobRecord.read(raw, position=position)
        return None

    async def delete(self, tokens: Iterable[str]) -> Done:
        # Each token once: named twice, it would find and remove a second job with the
        # same bytes (a duplicate push), which nobody asked to delete.
        tokens = list(dict.fromkeys(tokens))
        for token in tokens:  # all checked before any is acted on
            self._parse(token)
        done = missing = 0
        for token in tokens:
            record = await self.find(token)
            admin = self._inspector.admin()
            if record is not None and await admin.queue_remove(self.name, record.raw):
                await _release_lock(admin, record)
                done += 1
            else:
                missing += 1
        return Done(done, missing)

    async def clear(self) -> int:
        """Delete every job on the queue; returns how many there were."""
        return await self._inspector.admin().queue_clear(self.name)


class Queues:
    def __init__(self, inspector: Inspector) -> None:
        self._inspector = inspector

    async def names(self) -> list[str]:
        return await self._inspector.admin().queue_names()

    async def infos(self, names: Sequence[str] | None = None) -> list[QueueInfo]:
        admin = self._inspector.admin()
        if names is None:
            names = await admin.queue_names()
        heads = await admin.queue_heads(names)
        now = await admin.now()
        infos = []
        for name, (size, oldest) in zip(names, heads, strict=True):
            latency = 0.0
            if oldest is not None:
                enqueued = JobRecord.read(oldest).stamp("enqueued_at")
                latency = max(0.0, now - enqueued) if enqueued is not None else 0.0
            infos.append(QueueInfo(name, size, latency))
        return infos


class JobSet:
    """A sorted set of jobs (schedule, retry or dead): pages, search, and the actions
    retry (onto its queue now), delete and kill (to dead), one by one or on all."""

    target: SetName
    newest_first = False

    def __init__(self, inspector: Inspector) -> None:
        self._inspector = inspector

    async def size(self) -> int:
        return await self._inspector.admin().set_size(self.target)

    async def page(self, number: int = 1, size: int = PAGE_SIZE) -> Page[JobRecord]:
        start, stop, size = _page_bounds(number, size)
        admin = self._inspector.admin()
        total = await admin.set_size(self.target)
        window = await admin.set_window(self.target, start, stop, newest_first=self.newest_first)
        return Page([JobRecord.read(raw, score=score) for raw, score in window],
                    number, size, total)

    async def search(self, term: str, limit: int = SEARCH_LIMIT) -> Found:
        """Entries whose JSON contains ``term`` (class, args, error; ASCII case ignored)."""
        if not isinstance(term, str) or not term.strip():
            raise ValueError("a search needs a non-empty term")
        admin = self._inspector.admin()
        pattern, cursor, looked = glob_pattern(term.strip()), 0, 0
        found: list[JobRecord] = []
        while True:
            cursor, matches = await admin.set_scan(self.target, pattern, cursor, 1000)
            found += [JobRecord.read(raw, score=score) for raw, score in matches]
            looked += 1000
            if cursor == 0:
                complete = len(found) <= limit
                break
            if len(found) >= limit or looked >= SEARCH_BUDGET:
                complete = False
                break
        found.sort(key=lambda r: r.score or 0.0, reverse=self.newest_first)
        return Found(found[:limit], complete)

    async def find(self, token: str) -> JobRecord | None:
        where, hashed = _split_token(token)
        try:
            score = float(where)
        except ValueError:
            raise ValueError(f"not a {self.target} entry token: {token!r}") from None
        if math.isnan(score):  # no entry has it, and Redis refuses it as a bound
            raise ValueError(f"not a {self.target} entry token: {token!r}")
        # Many entries may share a score (a batch scheduled for one time): read them a
        # batch at a time, never all at once, and look at a bounded number of them.
        admin = self._inspector.admin()
        for start in range(0, SEARCH_BUDGET, FIND_BATCH):
            batch = await admin.set_at_score(self.target, score, start, FIND_BATCH)
            for raw in batch:
                if digest(raw) == hashed:
                    return JobRecord.read(raw, score=score)
            if len(batch) < FIND_BATCH:
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
        removed = await admin.set_remove(self.target, [r.raw for r in records])
        for record in itertools.compress(records, removed):
            await _release_lock(admin, record)
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
            records = [JobRecord.read(raw, score=s) for raw, s in window]
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
            payload = dict(record.payload)
            queue = self._queue_of(payload)
            payload["queue"], payload["enqueued_at"] = queue, now
            self._before_retry(payload)
            items.append((record.raw, job.encode(payload, 2**31), queue))
            sent.append(record)
        locked = [r for r in sent if await _take_lock(self._inspector.admin(), r)]
        moved = await self._inspector.admin().set_to_queues(self.target, items)
        stuck = await self._left_behind(sent) if moved < len(items) else []
        for record in locked:
            if any(reason.startswith(record.token) for reason in stuck):
                await _release_lock(self._inspector.admin(), record)
        return Done(moved, len(items) - moved - len(stuck), refused + stuck)

    async def _left_behind(self, sent: Sequence[JobRecord]) -> list[str]:
        """Why entries ``promote`` left in the set are still there. It skips a member
        that is gone (it ran, another process moved it) and leaves in place one whose
        queue key cannot be written (another type): counted as gone, that one would not
        be stepped over, and ``retry_all`` would try it again forever."""
        still = await self._inspector.admin().set_contains(self.target,
                                                           [r.raw for r in sent])
        return [f"{record.token}: its queue cannot be written (the key holds another "
                "type, or Redis is out of memory); the entry stays here"
                for record, there in zip(sent, still, strict=True) if there]

    def _queue_of(self, payload: dict[str, Any]) -> str:
        try:
            return check_queue_name(payload.get("queue"))
        except (TypeError, ValueError):
            return self._inspector.default_queue

    def _before_retry(self, payload: dict[str, Any]) -> None:
        """A manual retry does not use up an attempt (as in Sidekiq): the count goes
        back one, so that a failure of this run is filed as the last one was."""
        count = payload.get("retry_count")
        if isinstance(count, int) and not isinstance(count, bool):
            if count <= 0:
                payload.pop("retry_count")
            else:
                payload["retry_count"] = count - 1

    async def _kill(self, records: Sequence[JobRecord], missing: int) -> Done:
        admin, done = self._inspector.admin(), 0
        for record in records:
            if await admin.set_move(self.target, "dead", record.raw, record.raw):
                await _release_lock(admin, record)
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
    digest, ttl = payload.get("unique_digest"), payload.get("unique_ttl")
    if not isinstance(digest, str) or record.jid is None:
        return False
    stored = _number(ttl)
    seconds = stored if stored is not None and stored > 0 else unique.DEFAULT_TTL
    try:
        return await admin.take_unique(digest, record.jid, seconds)
    except RedisError:
        return False


async def _release_lock(admin: Admin, record: JobRecord) -> None:
    """A job an admin deleted or moved to dead will not run: the unique lock it owns is
    released, as when a worker files a job in dead. Kept, it would refuse the same job's
    next enqueue (as a duplicate of nothing) until it expired: over a retry's delay,
    which it was extended to cover, hours or days. Best effort: the lock has a TTL."""
    digest = record.payload.get("unique_digest") if record.payload is not None else None
    if isinstance(digest, str) and record.jid is not None:
        with contextlib.suppress(RedisError):
            await admin.release_unique(digest, record.jid)


class ScheduledSet(JobSet):
    """Jobs enqueued to run later, soonest first. ``retry`` = enqueue now."""

    target: SetName = "schedule"

    def _before_retry(self, payload: dict[str, Any]) -> None:
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


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningJob:
    jid: str
    name: str
    queue: str | None
    started_at: float | None
    runtime: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessInfo:
    """A worker process as its beats describe it."""

    identity: str
    alive: bool
    hostname: str | None
    pid: int | None
    started_at: float | None
    last_beat: float | None
    beat_age: float | None
    """Seconds since its last beat, by Redis' clock."""
    lag_ms: float | None
    concurrency: int | None
    busy: int
    queues: list[str]
    rss_bytes: int | None
    version: str | None
    in_progress: int
    """Jobs on its in-progress list (fetched, not settled)."""
    running: list[RunningJob]

    @property
    def awaiting_recovery(self) -> bool:
        """Stopped beating with jobs still on its list: recovery will requeue them."""
        return not self.alive and self.in_progress > 0

    def as_dict(self) -> dict[str, Any]:
        described = {name: getattr(self, name) for name in self.__dataclass_fields__}
        described["running"] = [vars_of(r) for r in self.running]
        described["awaiting_recovery"] = self.awaiting_recovery
        return described


def vars_of(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


class ProcessSet:
    """Worker processes (alive, and dead ones not yet forgotten by recovery), recent
    recoveries, and recent poison burials (ProcessDied)."""

    def __init__(self, inspector: Inspector) -> None:
        self._inspector = inspector

    async def all(self) -> list[ProcessInfo]:
        admin = self._inspector.admin()
        identities = await admin.identities()
        found = await admin.processes(identities)
        now = await admin.now()
        return [_process(entry, now) for entry in found]

    async def recoveries(self) -> list[dict[str, Any]]:
        """Recent recovery events, newest first; ``at`` is epoch seconds or None (an
        event is shown whatever else it holds)."""
        events = await self._inspector.admin().recoveries()
        return [{**event, "at": _number(event.get("at"))} for event in events]

    async def burials(self) -> list[JobRecord]:
        """Recent jobs buried in dead as ProcessDied (each killed its process too often)."""
        window = await self._inspector.admin().set_window("dead", 0, BURIALS_LOOKED_AT - 1,
                                                          newest_first=True)
        records = [JobRecord.read(raw, score=score) for raw, score in window]
        return [r for r in records if r.error_class == "ProcessDied"]


def _number(value: Any) -> float | None:
    """A stored number as a finite float, or None (not a number, NaN, infinite, or an
    int past a float's range: ``math.isfinite`` raises OverflowError on those)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value) if math.isfinite(value) else None
        except OverflowError:
            return None
    return None


def _text(value: Any) -> str | None:
    """A string a beat should hold, or None (a beat is shown whatever it holds)."""
    return value if isinstance(value, str) else None


def _process(entry: dict[str, Any], now: float) -> ProcessInfo:
    info = entry["info"] or {}
    last = entry["last_beat"]
    running = []
    for jid, what in sorted(entry["running"].items()):
        started = _number(what.get("run_at"))
        running.append(RunningJob(
            jid=jid, name=str(what.get("class", "?")), queue=_text(what.get("queue")),
            started_at=started, runtime=max(0.0, now - started) if started else None))
    pid, concurrency = _number(info.get("pid")), _number(info.get("concurrency"))
    rss = _number(info.get("rss_bytes"))
    queues = info.get("queues")
    return ProcessInfo(
        identity=entry["identity"], alive=entry["alive"],
        hostname=_text(info.get("hostname")), pid=int(pid) if pid is not None else None,
        started_at=_number(info.get("started_at")), last_beat=last,
        beat_age=max(0.0, now - last) if last is not None else None,
        lag_ms=_number(info.get("lag_ms")),
        concurrency=int(concurrency) if concurrency is not None else None,
        busy=len(running) if not entry["alive"] else int(_number(info.get("busy")) or 0),
        queues=[str(q) for q in queues] if isinstance(queues, list) else [],
        rss_bytes=int(rss) if rss is not None else None,
        version=str(info["version"]) if "version" in info else None,
        in_progress=entry["in_progress"], running=running,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PeriodicInfo:
    name: str
    schedule: str
    tz: str
    queue: str
    next_run: float
    last_run: float | None
    running: bool


class PeriodicJobs:
    """The App's periodic jobs: schedule, next run, last run, running now."""

    def __init__(self, inspector: Inspector) -> None:
        self._inspector = inspector

    async def all(self) -> list[PeriodicInfo]:
        app = self._inspector.app
        periodics = list(app.periodics.values())
        state = await self._inspector.admin().periodic_state([p.name for p in periodics])
        now = time.time()
        infos = []
        for p in periodics:
            last, running = state[p.name]
            definition = app.registry.get(p.name)
            queue = definition.options.queue if definition is not None else "?"
            infos.append(PeriodicInfo(name=p.name, schedule=p.schedule, tz=str(p.tz),
                                      queue=queue, next_run=p.next_tick(now), last_run=last,
                                      running=running))
        return infos


class Inspector:
    """Everything the dashboard and the admin CLI read and do, for one App.

    It holds no connection of its own: each call uses the App's pool for the running
    event loop (closed by ``App.close()``).
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self.stats = Stats(self)
        self.queues = Queues(self)
        self.scheduled = ScheduledSet(self)
        self.retries = RetrySet(self)
        self.dead = DeadSet(self)
        self.processes = ProcessSet(self)
        self.periodic = PeriodicJobs(self)

    @property
    def default_queue(self) -> str:
        names = self.app.settings.queue_names
        return "default" if "default" in names else names[0]

    def admin(self) -> Admin:
        return Admin(self.app._client.store())

    def queue(self, name: str) -> Queue:
        return Queue(self, name)

    def job_set(self, name: str) -> JobSet:
        """``"scheduled"``, ``"retries"`` or ``"dead"`` (also ``schedule``/``retry``)."""
        sets = {"scheduled": self.scheduled, "schedule": self.scheduled,
                "retries": self.retries, "retry": self.retries, "dead": self.dead}
        if name not in sets:
            raise ValueError(f"no job set named {name!r}: use scheduled, retries or dead")
        return sets[name]

    async def server(self) -> dict[str, Any]:
        """The Redis server: name, version, memory, clients, uptime. Every field is None
        when the server refuses INFO (shown as "n/a")."""
        info = await self.admin().server_info()
        return info if info is not None else dict.fromkeys(SERVER_FIELDS)

    async def summary(self) -> dict[str, Any]:
        """Totals and sizes for the dashboard's header and ``stats``, the dead set's
        limits, and the eviction warning (None when Redis keeps every key)."""
        admin = self.admin()
        totals = await self.stats.totals()
        queues = await self.queues.infos()
        processes = await self.processes.all()
        policy = await admin.eviction_policy()
        settings = self.app.settings
        return {
            "processed": totals.processed,
            "failed": totals.failed,
            "enqueued": sum(q.size for q in queues),
            "scheduled": await admin.set_size("schedule"),
            "retries": await admin.set_size("retry"),
            "dead": await admin.set_size("dead"),
            "processes": sum(1 for p in processes if p.alive),
            "busy": sum(p.busy for p in processes if p.alive),
            "awaiting_recovery": sum(1 for p in processes if p.awaiting_recovery),
            "queues": [vars_of(q) for q in queues],
            "dead_max_jobs": settings.dead_max_jobs,
            "dead_max_age": settings.dead_max_age,
            "maxmemory_policy": policy,
            "eviction_warning": eviction_warning(policy),
            "at": totals.at,
        }
