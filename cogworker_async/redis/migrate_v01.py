"""The Redis side of the move from the first key layout (before hash-tagged keys;
``admin/migrate.py``): the commands that read the old keys and write them into the
per-slot layout.

``admin/migrate.py`` holds the model — the old names (``OldKeys``), which kind each key
is, the report — and finds the keys (``scan_keys``), then hands this module its plan;
here is what sends the commands, so that only ``redis/`` talks to redis-py. It imports
nothing of ``admin/`` (the core never imports the tools built on it): what it counts
into is named by the protocol ``Tallies``, which ``MigrationReport`` is.

Each batch is written where it goes before it is removed from where it was (the
scripts' rule, docs/design.md): a crash midway leaves duplicates, never a loss. Only
single-key commands, or commands on the keys of one slot, are sent.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import Any, Protocol

from cogworker_async.jobs import wire
from cogworker_async.jobs.unique import DEFAULT_TTL
from cogworker_async.redis.errors import ResponseError
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import HISTORY_TTL, as_bytes
from cogworker_async.redis.store import Store
from cogworker_async.settings import check_queue_name

Plan = dict[str, list[tuple[bytes, str]]]
"""kind -> ``(key, the rest of its name)`` of each first-layout key found; kind "" for
a key under the old namespace that the first layout did not write."""


class Tallies(Protocol):
    """What the moves count as they go (``admin.migrate.MigrationReport``'s fields)."""

    queued: dict[str, int]
    requeued: dict[str, int]
    staged: int
    scheduled: dict[str, int]
    retries: dict[str, int]
    dead: dict[str, int]
    repeat_orphans: int
    unsettled: int
    processed: int
    failed: int
    days: int
    cron_claims: int
    unique_locks: int
    unique_dropped: int
    deleted: int
    skipped: list[str]


async def scan_keys(store: Store, pattern: str, batch: int) -> AsyncIterator[bytes]:
    """Every key matching ``pattern``, by SCAN (on a cluster, of every primary)."""
    async for found in store.client.scan_iter(match=pattern, count=batch):
        yield as_bytes(found)


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


class Mover:
    """One migration's moves, in order; writes nothing in a dry run. ``batch``: entries
    one command reads or moves; ``rescan``: the old keys as they are now (a dry run
    looks for unique locks' jobs where they would be moved from)."""

    def __init__(self, store: Store, report: Tallies, default_queue: str, dry_run: bool,
                 *, batch: int, rescan: Callable[[], Awaitable[Plan]]) -> None:
        self.batch = batch
        self.rescan = rescan
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
        return wire.queue_of(payload if isinstance(payload, dict) else None, self.default)

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
            if not _queue_name(name):  # no old queue list after all
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
                key, -(offset + self.batch), -(offset + 1))]:
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
            while count := min(self.batch, int(await self.client.llen(staging))):
                async with self.client.pipeline(transaction=False) as pipe:
                    for _ in range(count):
                        pipe.lmove(staging, target, "LEFT", "RIGHT")
                    await pipe.execute()

    async def move_zset(self, key: bytes, kind: str, counts: dict[str, int]) -> None:
        """Each entry of the old ``kind`` set into its queue's set, same score."""
        target = {"schedule": self.keys.schedule, "retry": self.keys.retry,
                  "dead": self.keys.dead}[kind]
        offset = 0
        while batch := _scored(await self.client.zrange(key, offset, offset + self.batch - 1,
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
            plan = await self.rescan()
            sources += [(key, name, False) for key, name in plan.get("queue", [])]
            sources += [(key, None, False) for key, _ in plan.get("in_progress", [])]
            sources += [(key, None, True) for kind in ("schedule", "retry")
                        for key, _ in plan.get(kind, [])]
        found: dict[str, str] = {}
        for key, queue, is_zset in sources:
            async for raw in self.entries(key, is_zset):
                jid = wire.jid_of(raw)
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
                batch: Any = await (self.client.zrange(key, offset, offset + self.batch - 1)
                                    if is_zset else
                                    self.client.lrange(key, offset, offset + self.batch - 1))
            except ResponseError:
                return
            if not batch:
                return
            for raw in batch:
                yield as_bytes(raw)
            offset += len(batch)

    async def delete(self, keys: list[bytes]) -> None:
        """Delete old bookkeeping, one key a command (they may be on several nodes)."""
        self.report.deleted += len(keys)
        if self.dry_run:
            return
        for start in range(0, len(keys), self.batch):
            async with self.client.pipeline(transaction=False) as pipe:
                for key in keys[start:start + self.batch]:
                    pipe.delete(key)
                await pipe.execute()
