"""The move from the 0.1 key layout to the per-slot one (``redis/keys.py``), run once by
``cogworker-async migrate-keys`` (``migrate_cli.py``), with every 0.1 worker stopped.

0.1 named every key ``<namespace>:<what>``, with one schedule, retry and dead set for all
queues. ``migrate`` moves what matters — jobs, stats, periodic claims, unique locks —
and deletes what stopped 0.1 processes left about themselves (registries, beats,
markers, locks, orphan counters): the new layout rebuilds those as workers start.

Each batch is written where it goes before it is removed from where it was (the
scripts' rule, docs/design.md): a crash midway leaves duplicates — a job that may run
twice, a count added twice — never a loss, and running it again finishes the job; a
finished migration run again is a no-op. Only single-key commands, or commands on the
keys of one slot, are sent; old keys are found by SCAN (on a cluster, of every primary).
Unlike the rest of ``admin/``, it sends them itself (``store.client``): no Store knows
the old names, and ``OldKeys`` below is the one place they are still formatted.

Queue order: a queue's old jobs are taken from the old list's fetch end (0.1 clients
still running push on the other end, which leaves the batch read where it was), kept in
order in a staging list in the new queue's slot, then put on the new queue's fetch end
one LMOVE at a time (one slot: exactly once). The old next-to-run job runs first, before
jobs that upgraded clients already enqueued — exactly so when no worker of this version
fetches while it runs. Jobs on 0.1 in-progress lists (running, or finished but not
settled, when 0.1 stopped) go back on their queue ahead of its waiting jobs: they run
again (at-least-once, as after any crash). Jobs that 0.1 clients push after a run are
taken by the next one, onto the fetch end (ahead of the jobs already moved): run it
again once every client is upgraded.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import redis.asyncio
from redis.exceptions import ResponseError

from cogworker_async import job
from cogworker_async.errors import CogworkerError
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import HISTORY_TTL, as_bytes
from cogworker_async.redis.store import Store
from cogworker_async.settings import check_queue_name
from cogworker_async.unique import DEFAULT_TTL

BATCH: Final = 1000
"""Entries one command reads or moves: no call blocks Redis for long."""
UNKNOWN_SHOWN: Final = 20
"""Names of unknown keys a report lists (all are counted)."""
GLOB_SPECIAL: Final = "\\*?[]"


class OldWorkersAlive(CogworkerError):
    """A 0.1 process still marks itself alive: it would keep using the old keys."""

    def __init__(self, namespace: str, identities: list[str]) -> None:
        self.identities = identities
        super().__init__(
            f"{len(identities)} worker(s) of 0.1 look alive in namespace {namespace!r} "
            f"({', '.join(identities[:5])}): stop every 0.1 worker first (one that stops "
            "removes its marker; a killed one's expires after orphan_threshold, 20 s by "
            "default), or pass --force if they are gone")


@dataclass(frozen=True, slots=True)
class OldKeys:
    """The 0.1 key names (``<namespace>:<what>``, no hash tags), as 0.1's keys.py made
    them; only this migration still knows them. The namespace may hold braces: 0.1
    advised ``{cogworker}`` on Redis Cluster."""

    namespace: str

    def key(self, what: str) -> str:
        return f"{self.namespace}:{what}"

    def queue(self, name: str) -> str:
        return self.key(f"queue:{name}")

    def in_progress(self, identity: str) -> str:
        return self.key(f"in_progress:{identity}")

    def process(self, identity: str) -> str:
        return self.key(f"process:{identity}")

    def workers(self, identity: str) -> str:
        return self.key(f"workers:{identity}")

    def orphanings(self, jid: str) -> str:
        return self.key(f"orphanings:{jid}")

    def stats_processed_on(self, day: str) -> str:
        return self.key(f"stats:processed:{day}")

    def stats_failed_on(self, day: str) -> str:
        return self.key(f"stats:failed:{day}")

    def periodic_running(self, name: str) -> str:
        return self.key(f"cron:running:{name}")

    def unique(self, digest: str) -> str:
        return self.key(f"unique:{digest}")

    @property
    def pattern(self) -> str:
        """SCAN pattern of every key of the namespace (glob characters escaped)."""
        return "".join("\\" + c if c in GLOB_SPECIAL else c for c in self.namespace) + ":*"


# Every 0.1 key by its name after "<namespace>:": exact names, then prefixes.
KINDS: Final = {
    "queues": "registry", "schedule": "schedule", "retry": "retry", "dead": "dead",
    "repeat_orphans": "repeat_orphans", "unsettled": "unsettled",
    "stats:processed": "processed", "stats:failed": "failed", "cron:claimed": "cron",
    "in_progress_identities": "drop", "last_beat": "drop", "beats": "drop",
    "declared_dead": "drop", "recoveries": "drop", "recovery_lock": "drop",
}
PREFIXES: Final = (
    ("stats:processed:", "processed_on"), ("stats:failed:", "failed_on"),
    ("queue:", "queue"), ("in_progress:", "in_progress"), ("unique:", "unique"),
    ("process:", "process"), ("workers:", "drop"), ("orphanings:", "drop"),
    ("cron:running:", "drop"),
)


def kind_of(what: str) -> tuple[str, str] | None:
    """``(kind, the rest of the name)`` of a 0.1 key named ``<namespace>:<what>``; None
    for a key 0.1 did not write (a new-layout key ``<namespace>:{...}`` among them)."""
    if what in KINDS:
        return KINDS[what], ""
    for prefix, kind in PREFIXES:
        if what.startswith(prefix) and len(what) > len(prefix):
            return kind, what[len(prefix):]
    return None


@dataclass(slots=True)
class MigrationReport:
    """What a migration moved (a dry run: would move), by kind; per queue where a count
    has ``{queue: count}``."""

    old_namespace: str
    namespace: str
    dry_run: bool
    queued: dict[str, int] = field(default_factory=dict)
    """Jobs from the 0.1 queue lists."""
    requeued: dict[str, int] = field(default_factory=dict)
    """Jobs from 0.1 in-progress lists, put back on their queue: they run again."""
    staged: int = 0
    """Jobs an interrupted run left in staging, now on their queue."""
    scheduled: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    dead: dict[str, int] = field(default_factory=dict)
    repeat_orphans: int = 0
    unsettled: int = 0
    processed: int = 0
    failed: int = 0
    days: int = 0
    """Per-day processed/failed counters added to the new ones."""
    cron_claims: int = 0
    unique_locks: int = 0
    unique_dropped: int = 0
    """Unique locks whose job was not found waiting (queued, scheduled, retrying): a
    lock is only a guard against a duplicate enqueue, so dropping one loses no job."""
    deleted: int = 0
    """0.1 bookkeeping keys deleted (registries, beats, markers, locks, counters)."""
    alive: list[str] = field(default_factory=list)
    """0.1 identities whose alive marker was found."""
    skipped: list[str] = field(default_factory=list)
    """0.1 keys left in place, with why (a key of the wrong type, a bad value)."""
    unknown: list[str] = field(default_factory=list)
    """Keys under the old namespace that 0.1 did not write: left alone (first few)."""
    unknown_count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def jobs(self) -> int:
        """Every job entry moved (or to move)."""
        counted = (self.queued, self.requeued, self.scheduled, self.retries, self.dead)
        return (sum(sum(c.values()) for c in counted) + self.staged + self.repeat_orphans
                + self.unsettled)


async def migrate(
    store: Store, old_namespace: str, *, default_queue: str,
    periodic_queues: Mapping[str, str], dry_run: bool = False, force: bool = False,
) -> MigrationReport:
    """Move the 0.1 keys of ``old_namespace`` into ``store``'s namespace (new layout).

    ``default_queue`` takes entries whose queue cannot be read; ``periodic_queues`` maps
    each periodic job's name to its queue (its claim goes there, else to the default).
    Refuses (``OldWorkersAlive``) while a 0.1 worker marks itself alive, unless
    ``force``; a dry run reads and counts, and writes nothing."""
    if not isinstance(old_namespace, str) or not old_namespace:
        raise ValueError("the old namespace must be a non-empty string")
    plan = await _scan(store.client, OldKeys(old_namespace))
    report = MigrationReport(old_namespace, store.keys.namespace, dry_run)
    report.alive = sorted(rest for _, rest in plan.get("process", []))
    report.unknown = [_text(key) for key, _ in plan.get("", [])]
    report.unknown_count, report.unknown = len(report.unknown), report.unknown[:UNKNOWN_SHOWN]
    if report.alive and not (force or dry_run):
        raise OldWorkersAlive(old_namespace, report.alive)
    mover = _Mover(store, report, default_queue, dry_run)
    await mover.run(plan, periodic_queues)
    return report


Plan = dict[str, list[tuple[bytes, str]]]
"""kind -> ``(key, the rest of its name)`` of each 0.1 key found; kind "" for a key
under the old namespace that 0.1 did not write."""


async def _scan(client: redis.asyncio.Redis, old: OldKeys) -> Plan:
    plan: Plan = {}
    prefix = old.key("").encode()
    async for found in client.scan_iter(match=old.pattern, count=BATCH):
        key = as_bytes(found)
        try:
            what = key[len(prefix):].decode("utf-8")
        except UnicodeDecodeError:
            what = "\ufffd"  # no name 0.1 wrote: unknown
        if what.startswith("{"):
            continue  # the new layout's (same namespace): never a name 0.1 wrote
        kind, rest = kind_of(what) or ("", "")
        plan.setdefault(kind, []).append((key, rest))
    for entries in plan.values():
        entries.sort()  # one order run after run (and queue lists by name)
    return plan


def staging(keys: Keys, queue: str) -> str:
    """A list in ``queue``'s slot holding its old jobs, in order, on their way to it: it
    exists while a migration runs, or after one was interrupted (the next run empties
    it). Its name extends the queue's, so it shares its hash tag."""
    return keys.migrating(queue)


def _count(counts: dict[str, int], queue: str, n: int = 1) -> None:
    counts[queue] = counts.get(queue, 0) + n


def _text(key: bytes) -> str:
    return key.decode("utf-8", "replace")


def _queue_name(name: str) -> bool:
    try:
        check_queue_name(name)
    except ValueError:
        return False
    return True


def _scored(reply: Any) -> list[tuple[bytes, float]]:
    """A ZRANGE WITHSCORES reply as ``(member, score)`` pairs."""
    return [(as_bytes(member), float(score)) for member, score in reply]


def _finite(stored: Any) -> float | None:
    """A stored stamp as a finite number, or None."""
    try:
        value = float(stored)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except Exception:  # anything unreadable (bad UTF-8, deep nesting): no queue of its own
        return None


class _Mover:
    """One migration's moves, in order; writes nothing in a dry run."""

    def __init__(self, store: Store, report: MigrationReport, default_queue: str,
                 dry_run: bool) -> None:
        self.client = store.client
        self.store = store
        self.keys = store.keys
        self.report = report
        self.default = default_queue
        self.dry_run = dry_run
        self.registered: set[str] = set()

    async def run(self, plan: Plan, periodic_queues: Mapping[str, str]) -> None:
        await self.move_jobs(plan)
        await self.move_counters(plan)
        for key, _ in plan.get("cron", []):
            with self.skipping(key):
                await self.move_claims(key, periodic_queues)
        await self.move_locks(plan.get("unique", []))
        await self.delete([key for kind in ("drop", "process", "registry")
                           for key, _ in plan.get(kind, [])])

    @contextmanager
    def skipping(self, key: bytes) -> Iterator[None]:
        """Skip (and report) a key of the wrong type or with a bad value: the rest still
        moves. Redis refusing (NOPERM, OOM) is no fault of the key: it stops the run."""
        try:
            yield
        except (ResponseError, ValueError) as exc:
            if isinstance(exc, ResponseError) and not str(exc).startswith("WRONGTYPE"):
                raise
            self.report.skipped.append(f"{_text(key)}: {exc}")

    # -- where things go -----------------------------------------------------------------

    def queue_of(self, raw: bytes) -> str:
        """The queue of a stored job or entry (its ``queue`` field, else the default)."""
        payload = _json(raw)
        return job.queue_of(payload if isinstance(payload, dict) else None, self.default)

    def queue_of_record(self, raw: bytes) -> str:
        """The queue of an ``unsettled`` hand-over record (its entry's queue)."""
        record = _json(raw)
        entry = record.get("payload") if isinstance(record, dict) else None
        return self.queue_of(entry.encode()) if isinstance(entry, str) else self.default

    def staging(self, queue: str) -> str:
        return staging(self.keys, queue)

    def to_queue(self, queue: str, raw: bytes) -> tuple[str, str]:
        return queue, self.staging(queue)

    def to_staging(self, raw: bytes) -> tuple[str, str]:
        queue = self.queue_of(raw)
        return queue, self.staging(queue)

    def to_repeat_orphans(self, raw: bytes) -> tuple[str, str]:
        queue = self.queue_of(raw)
        return queue, self.keys.repeat_orphans(queue)

    def to_unsettled(self, raw: bytes) -> tuple[str, str]:
        queue = self.queue_of_record(raw)
        return queue, self.keys.unsettled(queue)

    async def register(self, queues: Iterable[str]) -> None:
        """Record queue names in the new registry before their slot is written."""
        new = sorted(set(queues) - self.registered)
        if new and not self.dry_run:
            await self.client.sadd(self.keys.queues, *new)
        self.registered.update(new)

    # -- jobs --------------------------------------------------------------------------

    async def move_jobs(self, plan: Plan) -> None:
        report = self.report
        for key, _ in plan.get("registry", []):
            with self.skipping(key):
                await self.old_registry(key)
        known = sorted(self.registered | set(await self.store.queue_names()))
        for queue in known:  # staged by an interrupted run
            report.staged += int(await self.client.llen(self.staging(queue)))
        # In-progress jobs first: staged to the right of their queue's waiting jobs.
        lists = [(key, self.to_staging, report.requeued)
                 for key, _ in plan.get("in_progress", [])]
        for key, name in plan.get("queue", []):
            if not _queue_name(name):  # no queue list of 0.1's after all
                report.skipped.append(f"{_text(key)}: not a queue name")
                continue
            lists.append((key, partial(self.to_queue, name), report.queued))
        for key, where, counts in lists:
            with self.skipping(key):
                await self.move_list(key, where, counts)
        await self.drain_staging(known)
        for kind, counts in (("schedule", report.scheduled), ("retry", report.retries),
                             ("dead", report.dead)):
            for key, _ in plan.get(kind, []):
                with self.skipping(key):
                    await self.move_zset(key, kind, counts)
        for kind, where in (("repeat_orphans", self.to_repeat_orphans),
                            ("unsettled", self.to_unsettled)):
            moved: dict[str, int] = {}
            for key, _ in plan.get(kind, []):
                with self.skipping(key):
                    await self.move_list(key, where, moved)
            setattr(report, kind, sum(moved.values()))

    async def old_registry(self, key: bytes) -> None:
        names = [as_bytes(m).decode("utf-8", "replace") for m in await self.client.smembers(key)]
        await self.register(name for name in names if _queue_name(name))

    async def move_list(self, key: bytes, where: Callable[[bytes], tuple[str, str]],
                        counts: dict[str, int]) -> None:
        """Move the old list ``key`` to the lists ``where(raw)`` names — ``(queue, list)``
        — batch by batch from its right (fetch) end, each batch onto the left of its
        destination in the same order: the old right end stays the right end."""
        offset = 0
        while batch := [as_bytes(raw) for raw in await self.client.lrange(
                key, -(offset + BATCH), -(offset + 1))]:
            groups: dict[str, list[bytes]] = {}
            queues = set()
            for raw in batch:
                queue, target = where(raw)
                groups.setdefault(target, []).append(raw)
                queues.add(queue)
                _count(counts, queue)
            await self.register(queues)
            if self.dry_run:
                offset += len(batch)
                continue
            async with self.client.pipeline(transaction=False) as pipe:
                for target, raws in groups.items():
                    pipe.lpush(target, *reversed(raws))
                await pipe.execute()
            await self.client.ltrim(key, 0, -(len(batch) + 1))  # what was just written

    async def drain_staging(self, known: Iterable[str]) -> None:
        """Put each staged job on its queue's fetch end, oldest last (so first to run):
        LMOVE, one slot, so each job is on exactly one of the two lists."""
        if self.dry_run:
            return
        for queue in sorted(self.registered.union(known)):
            staging, target = self.staging(queue), self.keys.queue(queue)
            while count := min(BATCH, int(await self.client.llen(staging))):
                async with self.client.pipeline(transaction=False) as pipe:
                    for _ in range(count):
                        pipe.lmove(staging, target, "LEFT", "RIGHT")
                    await pipe.execute()

    async def move_zset(self, key: bytes, kind: str, counts: dict[str, int]) -> None:
        """Each entry of the old ``kind`` set into its queue's set, same score."""
        target = {"schedule": self.keys.schedule, "retry": self.keys.retry,
                  "dead": self.keys.dead}[kind]
        offset = 0
        while batch := _scored(await self.client.zrange(key, offset, offset + BATCH - 1,
                                                        withscores=True)):
            groups: dict[str, dict[bytes, float]] = {}
            for raw, score in batch:
                groups.setdefault(self.queue_of(raw), {})[raw] = score
            for queue, entries in groups.items():
                _count(counts, queue, len(entries))
            await self.register(groups)
            if self.dry_run:
                offset += len(batch)
                continue
            async with self.client.pipeline(transaction=False) as pipe:
                for queue, entries in groups.items():
                    pipe.zadd(target(queue), entries)
                await pipe.execute()
            await self.client.zrem(key, *(member for member, _ in batch))

    # -- counters, claims, locks ---------------------------------------------------------

    async def move_counters(self, plan: Plan) -> None:
        keys, report = self.keys, self.report
        for kind, total in (("processed", keys.stats_processed), ("failed", keys.stats_failed)):
            for key, _ in plan.get(kind, []):
                with self.skipping(key):
                    setattr(report, kind, getattr(report, kind) + await self.add_count(
                        key, total, daily=False))
        for kind, on in (("processed_on", keys.stats_processed_on),
                         ("failed_on", keys.stats_failed_on)):
            for key, day in plan.get(kind, []):
                with self.skipping(key):
                    await self.add_count(key, on(day), daily=True)
                    report.days += 1

    async def add_count(self, key: bytes, target: str, *, daily: bool) -> int:
        """Add an old counter to its new one, then delete it (a crash in between adds it
        twice on the next run, which a count can bear); returns the count."""
        value = int(await self.client.get(key) or 0)  # ValueError: not a count, left
        if self.dry_run:
            return value
        if value:
            await self.client.incrby(target, value)
        if daily and value:  # a day is kept a year after its last count: the later expiry
            old_ttl = int(await self.client.pttl(key))
            keep = old_ttl if old_ttl > 0 else HISTORY_TTL * 1000
            if int(await self.client.pttl(target)) < keep:
                await self.client.pexpire(target, keep)
        await self.client.delete(key)
        return value

    async def move_claims(self, key: bytes, periodic_queues: Mapping[str, str]) -> None:
        """Each periodic job's last claimed tick into its queue's claims, keeping the
        later tick where a new worker claimed one already. A value that is no tick is
        dropped (the ticker would ignore it)."""
        for name, tick in (await self.client.hgetall(key)).items():
            queue = periodic_queues.get(as_bytes(name).decode("utf-8", "replace"),
                                        self.default)
            claimed = _finite(tick)
            if claimed is not None:
                self.report.cron_claims += 1
                await self.register([queue])
                if not self.dry_run:
                    await self.claim(self.keys.cron_claimed(queue), name, claimed)
            if not self.dry_run:
                await self.client.hdel(key, name)

    async def claim(self, target: str, name: bytes | str, tick: float) -> None:
        if await self.client.hsetnx(target, name, repr(tick)):
            return
        current = _finite(await self.client.hget(target, name))
        if current is None or tick > current:
            await self.client.hset(target, name, repr(tick))

    async def move_locks(self, locks: list[tuple[bytes, str]]) -> None:
        """Copy each unique lock, with what is left of its TTL, to the slot of the queue
        where its job waits; drop those whose job waits nowhere any more."""
        holders: dict[bytes, tuple[str, str]] = {}
        for key, digest in locks:
            with self.skipping(key):
                owner = await self.client.get(key)
                if owner is not None:
                    holders[key] = (digest, as_bytes(owner).decode("utf-8", "replace"))
        found = await self.find_jobs({jid for _, jid in holders.values()}) if holders else {}
        for key, (digest, jid) in holders.items():
            queue, ttl = found.get(jid), int(await self.client.pttl(key))
            if queue is None or ttl == -2:  # no job waits, or it expired meanwhile
                self.report.unique_dropped += 1
            else:
                self.report.unique_locks += 1
                if not self.dry_run:
                    await self.client.set(self.keys.unique(queue, digest), jid, nx=True,
                                          px=ttl if ttl > 0 else int(DEFAULT_TTL * 1000))
            if not self.dry_run:
                await self.client.delete(key)

    async def find_jobs(self, jids: set[str]) -> dict[str, str]:
        """jid -> the queue where a job of ``jids`` waits (queued, scheduled, retrying)
        in the new layout; in a dry run, where it would wait once moved."""
        sources: list[tuple[bytes | str, str | None, bool]] = []  # key, its queue, a zset?
        for name in sorted(self.registered | set(await self.store.queue_names())):
            sources += [(self.keys.queue(name), name, False),
                        (self.keys.schedule(name), name, True),
                        (self.keys.retry(name), name, True)]
        if self.dry_run:
            plan = await _scan(self.client, OldKeys(self.report.old_namespace))
            sources += [(key, name, False) for key, name in plan.get("queue", [])]
            sources += [(key, None, False) for key, _ in plan.get("in_progress", [])]
            sources += [(key, None, True) for kind in ("schedule", "retry")
                        for key, _ in plan.get(kind, [])]
        found: dict[str, str] = {}
        for key, queue, is_zset in sources:
            async for raw in self.entries(key, is_zset):
                jid = job.jid_of(raw)
                if jid is not None and jid in jids:
                    found.setdefault(jid, queue or self.queue_of(raw))
            if len(found) == len(jids):
                break
        return found

    async def entries(self, key: bytes | str, is_zset: bool) -> AsyncIterator[bytes]:
        """Every member of a list or zset, a batch at a time (none if the wrong type)."""
        offset = 0
        while True:
            try:
                batch: Any = await (self.client.zrange(key, offset, offset + BATCH - 1)
                                    if is_zset else
                                    self.client.lrange(key, offset, offset + BATCH - 1))
            except ResponseError:
                return
            if not batch:
                return
            for raw in batch:
                yield as_bytes(raw)
            offset += len(batch)

    async def delete(self, keys: list[bytes]) -> None:
        """Delete 0.1 bookkeeping, one key a command (they may be on several nodes)."""
        self.report.deleted += len(keys)
        if self.dry_run:
            return
        for start in range(0, len(keys), BATCH):
            async with self.client.pipeline(transaction=False) as pipe:
                for key in keys[start:start + BATCH]:
                    pipe.delete(key)
                await pipe.execute()
