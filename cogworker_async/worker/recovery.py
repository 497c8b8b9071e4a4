"""Recovery: the jobs of dead processes back on their queues, and this process's own
in-progress list kept honest.

Orphan recovery runs in every live process, every ``recovery_interval`` (one process at
a time, under a short lock), plus a one-off SCAN at boot for lists no registry knows.
Sidekiq Pro recovers orphans only when a process starts; here a dead process's jobs are
back within ``orphan_threshold + recovery_interval`` of its last beat. Whether the owner
is dead is decided inside ``requeue.lua``, atomically with the requeue, by Redis TIME:
checked separately, an owner that beat in between would see its running jobs run twice.

A job recovered more than ``max_orphanings`` times (it kills its process: OOM, SIGKILL)
is parked and then buried in dead as ``ProcessDied`` instead of coming back forever.

Reconcile (``reconcile.py``) keeps this process's own list honest; ``run_upkeep`` runs
both, every ``recovery_interval``.

One bad identity or record (wrong key type, corrupt stamp, unreadable JSON) is logged
and skipped; it never stops the others.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Final

import anyio

from cogworker_async.errors import UnparseablePayload, why
from cogworker_async.jobs import status, stored, wire
from cogworker_async.limits.limiter import Runner
from cogworker_async.redis.errors import ConnectionLost, Unavailable
from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings, check_queue_name
from cogworker_async.worker.locks import release_for_dead
from cogworker_async.worker.observers import Death, Observers
from cogworker_async.worker.reconcile import Reconciler
from cogworker_async.worker.settlement import MAX_ENTRY_BYTES
from cogworker_async.worker.streak import Streak

log = logging.getLogger(__name__)

CandidateSource = Callable[[], Awaitable[Iterable[tuple[str | None, str]]]]
"""Reads (queue or None, identity) pairs of processes that may own a list."""

RECENT_RECOVERIES: Final = 100
"""Recovery events kept for the dashboard."""
HEAD_BATCH: Final = 100
"""Parked orphans or unsettled records handled per pass."""
HOLD_BACK_SCAN: Final = 1000
"""Entries of a dead process's list looked at for repeat orphans to hold back."""


def _served(info: Mapping[str, Any] | None) -> set[str]:
    """The valid queue names a process's last beat said it served."""
    named = (info or {}).get("queues")
    if not isinstance(named, list):
        return set()
    served = set()
    for name in named:
        try:
            served.add(check_queue_name(name))
        except (TypeError, ValueError):
            continue
    return served


def process_died_entry(raw: bytes, *, max_orphanings: int, identity: str,
                       info: Mapping[str, Any] | None, now: float) -> wire.Payload:
    """The dead entry of a job that kept killing its process."""
    message = (f"its process died while running it more than {max_orphanings} times "
               "(killed for memory? SIGKILL?): not retried again")
    try:
        entry = wire.decode(raw, MAX_ENTRY_BYTES)
    except UnparseablePayload as exc:
        entry = wire.unparseable_entry(raw, queue="", reason=str(exc), now=now)
    entry.update({"error_class": "ProcessDied", "error_message": message, "failed_at": now,
                  "orphaned_from": identity, "orphaned_process": dict(info or {})})
    return entry


class Recovery:
    def __init__(self, store: Store, settings: Settings, identity: str, *,
                 may_judge: Callable[[str], bool] = lambda queue: True,
                 observers: Observers | None = None) -> None:
        self.store = store
        self.observers = observers if observers is not None else Observers()
        self.settings = settings
        self.identity = identity
        self.may_judge = may_judge
        """False for a queue while this process may not declare others dead in its slot
        (see recover_orphans)."""
        self._away: Exception | None = None
        """The first lost connection of this pass (a node away): raised at its end."""
        self._unreachable: set[str] = set()
        """Queues whose node failed earlier in this pass: not called again in it (a
        hung node would cost a socket timeout per call)."""
        self.scanned = False
        """The boot SCAN has been read (it is tried on each pass until it has been)."""
        self._found: dict[str, set[str]] = {}
        """identity -> queues where the SCAN found its list and it was not judged yet
        (that slot was not steady): no registry may know them, so they are kept."""

    async def recover_orphans(self, *, scan: bool = False) -> int:
        """One pass over every other identity; returns how many jobs were requeued.

        Nobody is judged dead in a queue's slot while ``may_judge(queue)`` is false: the
        Manager makes it false for ``orphan_threshold`` after one of this process's own
        beats failed in that slot. When this process could not beat there (Redis down,
        restarted, unreachable; on a cluster, that shard), neither could the others:
        once it is back every stamp there is stale, and the live processes would look
        dead to whichever one ran recovery first, their running and finished-but-unacked
        jobs requeued to run twice. Waiting out the threshold lets the live ones beat
        first (tests/worker/chaos/redisfaults/test_redis_restarts.py, 6b). A slot elsewhere is
        judged all the same: one shard away must not leave every dead process's jobs on
        the other shards where they are (tests/redis/cluster/test_shard_away.py).

        A node that cannot be reached stops only what lives on it: the pass goes on
        with the other slots, and raises the first lost connection at its end (its
        streak says it once).

        A process has a list in each queue's slot it fetched from; each is recovered in
        that slot, where ``requeue.lua`` judges the owner by the beats it wrote there
        (``beat.lua``), atomically with the move. The queues come from the registry of
        queue names; the identities from each queue's registry, plus a SCAN of every
        node at boot for lists no registry knows.
        """
        self._away, self._unreachable = None, set()
        queues = await self._queues()
        judged = [queue for queue in queues if self.may_judge(queue)]
        candidates = await self._candidates(judged, scan and not self.scanned)
        for identity, found in self._found.items():
            candidates.setdefault(identity, set()).update(found)
        # This identity's lists on the queues it serves are the reconciler's; one on another
        # queue was left by an earlier process of the same identity (started again with
        # other queues): nothing beats in that slot, and nobody else recovers it while
        # this identity is alive.
        own = candidates.pop(self.identity, set()) - set(self.settings.queue_names)
        if own:
            candidates[self.identity] = own
        moved = 0
        for identity in sorted(candidates):
            try:
                moved += await self._recover(identity, sorted(candidates[identity]))
            except ConnectionLost as exc:  # not this identity's fault: the streak says it
                self._lost(exc)
            except Exception as exc:
                log.error("orphan recovery skipped %s: %s", identity, why(exc))
        await self._handed_over(queues)
        if self._away is not None:
            raise self._away
        return moved

    async def _handed_over(self, queues: Sequence[str]) -> None:
        """Bury each queue's parked repeat orphans and file its hand-over records."""
        for queue in queues:
            if queue in self._unreachable:
                continue
            for what in (self.bury_repeat_orphans, self.file_unsettled):
                try:
                    await what(queue)
                except ConnectionLost as exc:
                    self._lost(exc)
                    self._unreachable.add(queue)
                    break
                except Exception as exc:
                    log.error("orphan recovery: %s of queue %r failed: %s", what.__name__,
                              queue, why(exc))

    def _lost(self, exc: Exception) -> None:
        self._away = self._away or exc

    async def _queues(self) -> list[str]:
        """Every registered queue, and this process's own (registered as it started,
        but a registry Redis lost must not hide them)."""
        try:
            names = set(await self.store.queue_names())
        except ConnectionLost as exc:  # the namespace's node away: its own still judged
            self._lost(exc)
            names = set()
        except Exception as exc:
            log.error("orphan recovery: reading the queue names failed: %s", why(exc))
            names = set()
        return sorted(names | set(self.settings.queue_names))

    async def _candidates(self, queues: Sequence[str], scan: bool) -> dict[str, set[str]]:
        """identity -> the queues where it may own a list. Each source is read on its
        own: one unreadable (a key of the wrong type) must not hide another."""
        found: dict[str, set[str]] = {}
        sources: list[tuple[str | None, CandidateSource]] = [
            (None, self._namespace_identities),
            *((queue, partial(self._queue_identities, queue)) for queue in queues),
            *([(None, self._scanned_lists)] if scan else []),
        ]
        for queue_read, source in sources:
            try:
                pairs = await source()
            except ConnectionLost as exc:  # that node away: the others' candidates count
                self._lost(exc)
                if queue_read is not None:
                    self._unreachable.add(queue_read)
                continue
            except Exception as exc:
                log.error("orphan recovery: reading candidates failed: %s", why(exc))
                continue
            for queue, identity in pairs:
                owned = found.setdefault(identity, set())
                if queue is not None:
                    owned.add(queue)
        return found

    async def _scanned_lists(self) -> list[tuple[str | None, str]]:
        """The SCAN's (queue, identity) pairs, kept until each is judged."""
        pairs = await self.store.scanned_lists()
        self.scanned = True
        for queue, identity in pairs:
            if queue is not None:
                self._found.setdefault(identity, set()).add(queue)
        return list(pairs)

    async def _namespace_identities(self) -> list[tuple[str | None, str]]:
        """Every process in the namespace's registry (no queue known from there)."""
        return [(None, identity) for identity in await self.store.registered_identities()]

    async def _queue_identities(self, queue: str) -> list[tuple[str | None, str]]:
        return [(queue, identity) for identity in await self.store.queue_identities(queue)]

    async def _recover(self, identity: str, queues: Sequence[str]) -> int:
        try:
            if identity != self.identity and await self.store.is_alive(identity):
                return 0  # a quick no; each slot then judges alone
            info = await self.store.beat_info(identity)
        except ConnectionLost as exc:  # the namespace's node away: each slot judges alone
            self._lost(exc)
            info = None
            # ... but only the slots this process beats in: of another queue's slot it
            # knows nothing (its shard may have just come back, every stamp stale).
            queues = [queue for queue in queues if queue in self.settings.queue_names]
        if identity != self.identity:
            # The queues it said it served, too: a registry of queue names Redis lost
            # must not let it be forgotten with a list left in one of them.
            queues = sorted(set(queues) | _served(info))
        moved = parked = cancelled = 0
        gone = True
        for queue in queues:
            try:
                done = await self._recover_in(identity, queue, info)
            except ConnectionLost as exc:  # that shard away: the others are recovered
                self._lost(exc)
                self._unreachable.add(queue)
                done = None
            if done is None:
                gone = False
                continue
            moved, parked = moved + done[0], parked + done[1]
            cancelled += done[3]
            gone &= done[2]
        if moved or parked or cancelled:
            log.warning("requeued %d job(s) left in progress by dead process %s%s%s",
                        moved, identity,
                        f"; {parked} orphaned too often" if parked else "",
                        f"; {cancelled} cancelled, dropped" if cancelled else "")
            event = {"identity": identity, "at": time.time(), "requeued": moved,
                     "parked": parked, "cancelled": cancelled, "by": self.identity,
                     "last_beat": info}
            await self._record(event)
        if gone:
            await self.store.forget(identity, None, declared_dead=True)
        return moved

    async def _recover_in(self, identity: str, queue: str, info: Mapping[str, Any] | None,
                          ) -> tuple[int, int, bool, int] | None:
        """Recover ``identity``'s list of ``queue``: (moved, parked, forgotten there,
        cancelled jobs dropped), or None when it was not (alive as that slot sees it, or
        not judged now)."""
        if queue in self._unreachable or not self.may_judge(queue):  # not now
            return None
        judged = self._found.get(identity)
        if judged is not None:  # judged now: a registry or this pass decides from here
            judged.discard(queue)
            if not judged:
                del self._found[identity]
        result = await self.store.recover(
            identity, queue, dead_for=self.settings.orphan_threshold,
            max_orphanings=self.settings.max_orphanings,
            keep=await self._held_back(identity, queue),
        )
        if result is None:  # alive after all, as seen by this queue's slot
            return None
        if result.moved:
            self.observers.recovered(queue, result.moved)
        if result.parked:
            await self.bury_repeat_orphans(queue, identity, info)
        # Recovery never removes a declared_dead mark: it is the only evidence a paused
        # process accepts, on waking, that its jobs run elsewhere (missing keys alone
        # mean Redis lost them: see beat.lua), and the pass that set it may have lost its
        # reply, leaving a later pass to find the list empty and forget the identity.
        # Only the process itself clears its mark (first beat, fencing, retire).
        forgotten = await self.store.forget(identity, queue, declared_dead=True)
        return result.moved, result.parked, forgotten, result.cancelled

    async def _record(self, event: dict[str, Any]) -> None:
        """Add a recovery event (informational). The jobs are already back: a failure
        here must not stop the pass before the owner is forgotten. Tried twice — right
        after Redis restarted, the pool's first use of a stale connection fails."""
        for attempt in (1, 2):
            try:
                await self.store.record_recovery(event, RECENT_RECOVERIES)
                return
            except Unavailable as exc:
                if attempt == 2:
                    log.warning("couldn't record the recovery of %s: %s", event["identity"],
                                why(exc))

    async def _held_back(self, identity: str, queue: str) -> list[bytes]:
        """Jobs that were orphaned before come back one per pass, not all at once.

        Recovered together, the jobs of a process killed by a poison job land on one
        worker together, die with the poison again, and are buried with it as
        ProcessDied. Brought back one at a time, a repeat orphan runs apart from the other
        repeat orphans: the poison dies alone, the bystanders finish. A job about to be
        parked (orphaned too often) is never held back. The cost: a job orphaned more
        than once can come back up to (its rank) x recovery_interval later.
        """
        listed = await self.store.list_head(self.store.keys.in_progress(queue, identity),
                                            HOLD_BACK_SCAN)
        counts = await self.store.orphan_counts(queue, [wire.jid_of(raw) for raw in listed])
        limit = self.settings.max_orphanings
        repeat = [raw for raw, count in zip(listed, counts, strict=True) if 0 < count < limit]
        return repeat[1:]

    async def bury_repeat_orphans(self, queue: str, identity: str = "",
                                  info: Mapping[str, Any] | None = None) -> None:
        """File each parked job of ``queue`` in dead as ProcessDied (whatever its retry
        setting)."""
        for raw in await self.store.list_head(self.store.keys.repeat_orphans(queue), HEAD_BATCH):
            entry = process_died_entry(raw, max_orphanings=self.settings.max_orphanings,
                                       identity=identity, info=info, now=time.time())
            error = status.error_text(str(entry.get("error_class") or "ProcessDied"),
                                      str(entry.get("error_message") or ""))
            if not await self.store.bury_orphan(queue, raw, wire.encode(entry, MAX_ENTRY_BYTES),
                                                wire.jid_of(raw), error):
                return  # someone else is burying: leave the rest to them
            log.error("jid=%s orphaned more than %d times: moved to dead (ProcessDied)",
                      entry["jid"], self.settings.max_orphanings)
            self.observers.died(Death(
                jid=wire.jid_of(raw), name=str(entry.get("class") or "") or None, queue=queue,
                reason=str(entry.get("error_class") or "ProcessDied"),
                message=str(entry.get("error_message") or ""), entry=dict(entry)))
            await release_for_dead(self.store, entry)

    async def file_unsettled(self, queue: str) -> None:
        """File what stopping processes handed over for ``queue``, head first."""
        for record in await self.store.list_head(self.store.keys.unsettled(queue), HEAD_BATCH):
            try:
                parsed = stored.json_object(record)
                if parsed is None:
                    raise ValueError("not a JSON object (or damaged: too deep, not UTF-8)")
                target = parsed["set"]
                if target not in ("retry", "dead"):
                    raise ValueError(f"unknown set {target!r}")
                entry, delay = parsed["payload"].encode(), stored.number(parsed.get("delay", 0))
                if delay is None:
                    raise ValueError("its delay is no finite number")
            except Exception as exc:  # unreadable: filed in dead as it is, never dropped
                target, delay = "dead", 0.0
                entry = wire.encode(wire.unparseable_entry(
                    record, queue=queue, reason=f"unreadable hand-over record: {exc!r}",
                    now=time.time()), MAX_ENTRY_BYTES)
            if not await self.store.file_unsettled(queue, record, target, entry, delay):
                return


async def run_upkeep(recovery: Recovery, reconciler: Reconciler, settings: Settings,
                     identity: str, runner: Runner | None = None) -> None:
    """Every ``recovery_interval`` (jittered): orphan recovery under the lock, reconcile,
    and every ``SWEEP_EVERY`` seconds a step of the sweep of the live status records of
    each queue it serves.
    Each says once when it starts failing and once when it recovers (``Streak``)."""
    recovering, reconciling = Streak("orphan recovery pass"), Streak("reconcile pass")
    sweeping = Streak("status records sweep")

    async def recover() -> object:
        # Its own queues stay registered (the Store re-sends at most once a minute):
        # Redis may have lost the registry, which recovery and the dashboard read.
        sent = await recovery.store.register_queues(settings.queue_names, required=False)
        # A process that may judge nobody yet (just started, or its beats just failed)
        # leaves the lock to one that may: holding it, it would hold up every recovery
        # for a whole interval (a fleet restarted one process at a time would recover
        # nothing).
        if not any(recovery.may_judge(queue) for queue in settings.queue_names):
            return None if sent else UNTRIED
        if await recovery.store.take_lock(recovery.store.keys.recovery_lock, identity,
                                          settings.recovery_interval):
            await recovery.recover_orphans(scan=True)  # the SCAN until it was read once
        return None

    async def reconcile() -> object:
        if runner is not None and runner.unreleased:  # limiter slots Redis missed
            await runner.release_late()
        return UNTRIED if await reconciler.reconcile() is None else None

    cursors = dict.fromkeys(settings.queue_names, "0")
    swept = [time.monotonic()]

    async def sweep() -> object:
        # A step per queue every SWEEP_EVERY seconds: a live hash of any size is swept at
        # a bounded cost, and never in the way of recovery, whose pass may come often.
        if not settings.track_jobs or time.monotonic() - swept[0] < SWEEP_EVERY:
            return UNTRIED
        swept[0] = time.monotonic()
        for queue, cursor in cursors.items():
            cursors[queue], _ = await recovery.store.sweep_records(queue, cursor)
        return None

    while True:
        await attempt(recover, recovering)
        await attempt(reconcile, reconciling)
        await attempt(sweep, sweeping)
        await anyio.sleep(settings.recovery_interval * random.uniform(0.8, 1.2))


SWEEP_EVERY: Final = 5.0
"""Seconds between two steps of the sweep of the live status records (``run_upkeep``):
with ``SWEEP_COUNT`` records a step, a live hash of a million jobs is swept in under
three hours, well within the live TTL (14 days) it enforces."""

UNTRIED: Final = object()
"""What a pass returns when it asked Redis nothing: not a sign that Redis is back, so a
failing streak goes on (else an outage would be said over twice: failed, "recovered"
by a pass that sent nothing, failed again)."""


async def attempt(step: Callable[[], Awaitable[object]], streak: Streak) -> bool:
    """Run one pass of a loop that must never stop; True if it worked. ``Unavailable`` is
    Redis away or refusing (its words suffice); anything else is a bug (traced once)."""
    try:
        result = await step()
    except Exception as exc:
        streak.failed(exc, trace=not isinstance(exc, Unavailable))
        return False
    if result is not UNTRIED:
        streak.succeeded()
    return True
