"""The admin model (Sidekiq's ``api.rb``): one class per Redis structure, shared by the
dashboard and the admin CLI, and the documented way to script an admin task.

    insp = Inspector(jobs)
    (await insp.stats.totals()).processed
    page = await insp.dead.page(1)                  # newest first, 25 a page
    await insp.dead.retry([page.items[0].token])    # back on its queue, one more attempt

Every read is bounded (a page, a window, one scan budget): no call loads a whole queue
or set. Entries are named by a ``token`` (their score or position and a digest of their
bytes), so an action finds exactly the entry the user saw, or reports it gone (it ran,
another process moved it) — never touches a different one. Moves go through the
worker's scripts: a job is written to its destination before it leaves its source.
The values it returns are in ``records``; the sorted sets in ``sets``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from cogworker_async.admin.batches import Batches
from cogworker_async.admin.job_status import JobStatuses
from cogworker_async.admin.limits import Limits
from cogworker_async.admin.periodic import periodic_infos
from cogworker_async.admin.records import (
    PAGE_SIZE,
    SERVER_FIELDS,
    DayTotals,
    Done,
    JobRecord,
    Page,
    PeriodicInfo,
    ProcessInfo,
    QueueInfo,
    Totals,
    digest,
    eviction_warning,
    finite_number,
    page_bounds,
    process_info,
    split_token,
    vars_of,
)
from cogworker_async.admin.run_metrics import RunMetrics
from cogworker_async.admin.serving import mark_unserved, mark_unserved_by, served_by_beats
from cogworker_async.admin.sets import DeadSet, JobSet, RetrySet, ScheduledSet, release_lock
from cogworker_async.admin.waiting import WaitingJobs
from cogworker_async.redis.admin import Admin
from cogworker_async.settings import check_queue_name

if TYPE_CHECKING:
    from cogworker_async.app import App

QUEUE_FIND_WINDOW: Final = 100
"""How far from where the user saw it a queued job is looked for (the queue moves)."""
HISTORY_DAYS: Final = 30
"""Days the history covers unless asked otherwise."""
MAX_HISTORY_DAYS: Final = 366
"""Days the history covers at most (a year, leap day included)."""
BURIALS_LOOKED_AT: Final = 200
"""Newest dead entries the Busy view reads to list recent ProcessDied burials."""
MAX_POSITION: Final = 2**62
"""The furthest queue position a token may name (far past any real queue)."""
MAX_QUEUES_READ: Final = 1000
"""Queues whose sizes one summary (every dashboard page's header, ``stats``) or one
Prometheus scrape reads at most: the App's own queues first, then the registry's in name
order. A queue per tenant makes tens of thousands of names, and reading each one's head
and sets took seconds a page (a scrape past its timeout). The rest are counted, not
read: ``queue_count`` and ``cogworker_queues_not_exported`` say how many were left out;
the Queues tab pages through them all."""
TOP_QUEUES: Final = 20
"""Queues the dashboard's index lists (the largest of those read)."""
QUEUES_PAGE_SIZE: Final = 100
"""Queues a page of the Queues tab shows."""


class Stats:
    """Processed and failed totals (what workers have flushed so far)."""

    def __init__(self, inspector: Inspector) -> None:
        self._inspector = inspector

    async def totals(self) -> Totals:
        admin = self._inspector.admin()
        processed, failed = await admin.totals()
        return Totals(processed=processed, failed=failed, at=time.time())

    async def reset(self) -> None:
        """Start counting again: the totals and the per-day history both (``make run``
        does it on each run; the header and "today" then agree)."""
        await self._inspector.admin().reset_totals()

    async def history(self, days: int = HISTORY_DAYS) -> list[DayTotals]:
        """Processed and failed per day (UTC), the last ``days`` days, oldest first."""
        if (isinstance(days, bool) or not isinstance(days, int)
                or not 1 <= days <= MAX_HISTORY_DAYS):
            raise ValueError(f"history covers 1..{MAX_HISTORY_DAYS} days, got {days!r}")
        today = datetime.now(UTC).date()
        names = [(today - timedelta(days=back)).isoformat() for back in range(days - 1, -1, -1)]
        counts = await self._inspector.admin().daily(names)
        return [DayTotals(day, processed, failed)
                for day, (processed, failed) in zip(names, counts, strict=True)]



class Queue:
    """One queue (a list): size, latency, pages of jobs in run order, delete, clear."""

    def __init__(self, inspector: Inspector, name: str) -> None:
        self._inspector = inspector
        self.name = check_queue_name(name)

    async def info(self) -> QueueInfo:
        return (await self._inspector.queues.infos([self.name]))[0]

    async def page(self, number: int = 1, size: int = PAGE_SIZE) -> Page[JobRecord]:
        start, stop, size = page_bounds(number, size)
        admin = self._inspector.admin()
        total = (await admin.queue_heads([self.name]))[0].size
        raws = await admin.queue_window(self.name, start, stop)
        items = [JobRecord.read(raw, position=start + i, home=self.name)
                 for i, raw in enumerate(raws)]
        return Page(items, number, size, total)

    @staticmethod
    def _parse(token: str) -> tuple[int, str]:
        where, hashed = split_token(token)
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
                return JobRecord.read(raw, position=position, home=self.name)
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
                await release_lock(admin, record)
                done += 1
            else:
                missing += 1
        return Done(done, missing)

    async def groups_running(self) -> dict[str, int]:
        """Fair group -> its jobs of this queue running now, across the processes."""
        return await self._inspector.admin().groups_running(self.name)

    async def clear(self) -> int:
        """Delete every job on the queue; returns how many there were."""
        return await self._inspector.admin().queue_clear(self.name)


class Queues:
    def __init__(self, inspector: Inspector) -> None:
        self._inspector = inspector

    async def names(self) -> list[str]:
        return await self._inspector.admin().queue_names()

    async def bounded(self, limit: int = MAX_QUEUES_READ) -> tuple[list[str], int]:
        """At most ``limit`` queue names to read — the App's own first, then the
        registry's in name order — and how many queues there are in all."""
        known = self._inspector.known_queues()
        names = sorted(known.union(await self.names()))
        first = [*sorted(known), *(name for name in names if name not in known)]
        return first[:limit], len(names)

    async def page(self, number: int = 1, size: int = QUEUES_PAGE_SIZE) -> Page[QueueInfo]:
        """Page ``number`` of every queue (registered or the App's own), by name: the
        heads of that page's queues only."""
        names = sorted(self._inspector.known_queues().union(await self.names()))
        start, stop, size = page_bounds(number, size)
        return Page(await self.infos(names[start:stop + 1]), max(1, number), size,
                    len(names))

    async def infos(self, names: Sequence[str] | None = None, *,
                    processes: Sequence[ProcessInfo] | None = None) -> list[QueueInfo]:
        """The rows of queues ``names`` (every registered queue by default), each marked
        ``unserved`` when it holds jobs none of the live ``processes`` serves (a caller
        that read them already passes them; else only the live processes' beats are
        read, once: a queue's page must not read every process's details)."""
        admin = self._inspector.admin()
        if names is None:
            names = await admin.queue_names()
        heads = await admin.queue_heads(names)
        waiting = await admin.waiting_counts(names)
        pauses = await admin.store.pauses(names)
        now = await admin.now()
        demands = await admin.queue_demand(names, now)
        infos = []
        for name, head, held, (due, running) in zip(names, heads, waiting, demands,
                                                    strict=True):
            latency = 0.0
            if head.oldest is not None:
                enqueued = JobRecord.read(head.oldest).stamp("enqueued_at")
                latency = max(0.0, now - enqueued) if enqueued is not None else 0.0
            pause = pauses.get(name)
            infos.append(QueueInfo(name, head.size, latency,
                                   pause.since if pause is not None else None, held,
                                   head.by_priority, head.by_group, due, running,
                                   head.size + due + running))
        if processes is not None:
            return mark_unserved(infos, processes)
        return mark_unserved_by(infos, served_by_beats(await admin.live_beats()))

    async def pause(self, name: str) -> bool:
        """Pause queue ``name`` (see ``App.pause``); False if it was paused already."""
        return await self._inspector.admin().store.pause(check_queue_name(name))

    async def resume(self, name: str) -> bool:
        """Resume queue ``name``; False if it was not paused."""
        return await self._inspector.admin().store.resume(check_queue_name(name))



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
        return [process_info(entry, now) for entry in found]

    async def recoveries(self) -> list[dict[str, Any]]:
        """Recent recovery events, newest first; ``at`` is epoch seconds or None (an
        event is shown whatever else it holds)."""
        events = await self._inspector.admin().recoveries()
        return [{**event, "at": finite_number(event.get("at"))} for event in events]

    async def burials(self) -> list[JobRecord]:
        """Recent jobs buried in dead as ProcessDied (each killed its process too often),
        from every queue's dead set."""
        window = await self._inspector.admin().set_window("dead", 0, BURIALS_LOOKED_AT - 1,
                                                          newest_first=True)
        records = [JobRecord.read(member, score=score, home=queue)
                   for member, score, queue in window]
        return [r for r in records if r.error_class == "ProcessDied"]



class PeriodicJobs:
    """The App's periodic jobs: schedule, next run, last run, running now."""

    def __init__(self, inspector: Inspector) -> None:
        self._inspector = inspector

    async def all(self) -> list[PeriodicInfo]:
        return await periodic_infos(self._inspector.app)  # App.periodic_jobs reads them too


class Inspector:
    """Everything the dashboard and the admin CLI read and do, for one App: ``stats``,
    ``queues`` (and ``queue(name)``), ``scheduled``, ``retries``, ``dead``, ``processes``,
    ``periodic``, ``metrics`` (runs per job class and minute), ``jobs`` (one job by
    its jid: status, cancel), ``limits``, ``batches`` (pages of batches, one's
    status and members, cancel) and ``waiting`` (the jobs waiting for their parents:
    a queue's page of them, what one waits for).

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
        self.metrics = RunMetrics(self)
        self.jobs = JobStatuses(self)
        self.limits = Limits(self)
        self.batches = Batches(self)
        self.waiting = WaitingJobs(self)

    @property
    def default_queue(self) -> str:
        """Where a job whose ``queue`` field cannot be read goes (``Settings.default_queue``)."""
        return self.app.settings.default_queue

    def admin(self) -> Admin:
        """The Redis reads and moves behind every call, on this event loop's pool."""
        return Admin(self.app._store(), self.known_queues())

    def known_queues(self) -> set[str]:
        """The App's own queues (its settings', and each registered job's): their sets
        are read even when the registry of queue names in Redis lacks them."""
        settings = self.app.settings
        queues = {settings.default_queue, *settings.queue_names}
        return queues | {definition.options.queue for definition in self.app.registry.values()}

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
        names, count = await self.queues.bounded()
        processes = await self.processes.all()
        queues = await self.queues.infos(names, processes=processes)
        policy = await admin.eviction_policy()
        scheduled, retries, dead = await admin.set_sizes(["schedule", "retry", "dead"],
                                                         names)
        settings = self.app.settings
        top = sorted(queues, key=lambda q: (-q.size, q.name))[:TOP_QUEUES]
        return {
            "processed": totals.processed,
            "failed": totals.failed,
            "enqueued": sum(q.size for q in queues),
            "waiting_for_parents": sum(q.waiting_for_parents for q in queues),
            "scheduled": scheduled,
            "retries": retries,
            "dead": dead,
            "processes": sum(1 for p in processes if p.alive),
            "busy": sum(p.busy for p in processes if p.alive),
            "awaiting_recovery": sum(1 for p in processes if p.awaiting_recovery),
            "queues": [{**vars_of(q), "state": q.state} for q in top],
            "queue_count": count,
            "queues_read": len(names),  # of queue_count: the sums are over these
            "dead_max_jobs": settings.dead_max_jobs,
            "dead_max_age": settings.dead_max_age,
            "maxmemory_policy": policy,
            "eviction_warning": eviction_warning(policy),
            "at": totals.at,
        }
