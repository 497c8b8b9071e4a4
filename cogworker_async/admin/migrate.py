"""The move from the first key layout (before hash-tagged keys) to the per-slot one
(``redis/keys.py``), run once by ``cogworker-async migrate-keys`` (``cli/migrate.py``),
with every worker of the first layout stopped.

The first builds named every key ``<namespace>:<what>``, with one schedule, retry and
dead set for all queues. ``migrate`` moves what matters — jobs, stats, periodic claims,
unique locks — and deletes what the stopped old-layout processes left about themselves
(registries, beats, markers, locks, orphan counters): the new layout rebuilds those as
workers start.

Each batch is written where it goes before it is removed from where it was (the
scripts' rule, docs/design.md): a crash midway leaves duplicates — a job that may run
twice, a count added twice — never a loss, and running it again finishes the job; a
finished migration run again is a no-op. Only single-key commands, or commands on the
keys of one slot, are sent; old keys are found by SCAN (on a cluster, of every primary).
No Store knows the old names: ``OldKeys`` below is the one place they are still
formatted, and this module makes the plan (which key is what) and the report; the
commands themselves are sent by ``redis/migrate_v01.py`` (only ``redis/`` talks to
redis-py), on the Store's client.

Queue order: a queue's old jobs are taken from the old list's fetch end (old-layout
clients still running push on the other end, which leaves the batch read where it was), kept in
order in a staging list in the new queue's slot, then put on the new queue's fetch end
one LMOVE at a time (one slot: exactly once). The old next-to-run job runs first, before
jobs that upgraded clients already enqueued — exactly so when no worker of this version
fetches while it runs. Jobs on old in-progress lists (running, or finished but not
settled, when the old workers stopped) go back on their queue ahead of its waiting jobs:
they run again (at-least-once, as after any crash). Jobs that old-layout clients push
after a run are
taken by the next one, onto the fetch end (ahead of the jobs already moved): run it
again once every client is upgraded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from cogworker_async.errors import CogworkerError
from cogworker_async.redis.migrate_v01 import Mover, Plan, scan_keys
from cogworker_async.redis.migrate_v01 import staging as staging  # re-exported
from cogworker_async.redis.store import Store

BATCH: Final = 1000
"""Entries one command reads or moves: no call blocks Redis for long. (Read when a
migration starts, and handed to its moves: tests set it smaller.)"""
UNKNOWN_SHOWN: Final = 20
"""Names of unknown keys a report lists (all are counted)."""
GLOB_SPECIAL: Final = "\\*?[]"


class OldWorkersAlive(CogworkerError):
    """A process of the first key layout still marks itself alive: it would keep using
    the old keys."""

    def __init__(self, namespace: str, identities: list[str]) -> None:
        self.identities = identities
        super().__init__(
            f"{len(identities)} worker(s) of the first key layout look alive in namespace "
            f"{namespace!r} ({', '.join(identities[:5])}): stop every worker of an earlier "
            "build first (one that stops removes its marker; a killed one's expires after "
            "orphan_threshold, 20 s by default), or pass --force if they are gone")


@dataclass(frozen=True, slots=True)
class OldKeys:
    """The first layout's key names (``<namespace>:<what>``, no hash tags), as the first
    builds' redis/keys.py made them; only this migration still knows them. The namespace may
    hold braces: the first builds advised ``{cogworker}`` on Redis Cluster."""

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


# Every first-layout key by its name after "<namespace>:": exact names, then prefixes.
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
    """``(kind, the rest of the name)`` of a first-layout key named
    ``<namespace>:<what>``; None for a key the first layout did not write (a new-layout
    key ``<namespace>:{...}`` among them)."""
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
    """Jobs from the old queue lists."""
    requeued: dict[str, int] = field(default_factory=dict)
    """Jobs from old in-progress lists, put back on their queue: they run again."""
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
    """Old bookkeeping keys deleted (registries, beats, markers, locks, counters)."""
    alive: list[str] = field(default_factory=list)
    """Identities of old-layout processes whose alive marker was found."""
    skipped: list[str] = field(default_factory=list)
    """Old keys left in place, with why (a key of the wrong type, a bad value)."""
    unknown: list[str] = field(default_factory=list)
    """Keys under the old namespace that the first layout did not write: left alone
    (first few)."""
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
    """Move the first layout's keys of ``old_namespace`` into ``store``'s namespace (new
    layout).

    ``default_queue`` takes entries whose queue cannot be read; ``periodic_queues`` maps
    each periodic job's name to its queue (its claim goes there, else to the default).
    Refuses (``OldWorkersAlive``) while an old-layout worker marks itself alive, unless
    ``force``; a dry run reads and counts, and writes nothing."""
    if not isinstance(old_namespace, str) or not old_namespace:
        raise ValueError("the old namespace must be a non-empty string")
    old = OldKeys(old_namespace)
    plan = await _scan(store, old)
    report = MigrationReport(old_namespace, store.keys.namespace, dry_run)
    report.alive = sorted(rest for _, rest in plan.get("process", []))
    report.unknown = [_text(key) for key, _ in plan.get("", [])]
    report.unknown_count, report.unknown = len(report.unknown), report.unknown[:UNKNOWN_SHOWN]
    if report.alive and not (force or dry_run):
        raise OldWorkersAlive(old_namespace, report.alive)
    mover = Mover(store, report, default_queue, dry_run, batch=BATCH,
                  rescan=partial(_scan, store, old))
    await mover.run(plan, periodic_queues)
    return report


async def _scan(store: Store, old: OldKeys) -> Plan:
    """Every key of the old namespace, by kind (``Plan``)."""
    plan: Plan = {}
    prefix = old.key("").encode()
    async for key in scan_keys(store, old.pattern, BATCH):
        try:
            what = key[len(prefix):].decode("utf-8")
        except UnicodeDecodeError:
            what = "\ufffd"  # no name the first layout wrote: unknown
        if what.startswith("{"):
            continue  # the new layout's (same namespace): never a first-layout name
        kind, rest = kind_of(what) or ("", "")
        plan.setdefault(kind, []).append((key, rest))
    for entries in plan.values():
        entries.sort()  # one order run after run (and queue lists by name)
    return plan


def _text(key: bytes) -> str:
    return key.decode("utf-8", "replace")
