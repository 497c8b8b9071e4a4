"""Cron ticker: enqueues each periodic job's due tick, once across all processes.

Every worker process ticks; ``cron_claim.lua`` lets exactly one of them enqueue each
tick (claim and push in one step), so there is no leader to lose. The ticker wakes at
the next due tick (at least once a second), and remembers the last tick known claimed
so that it asks Redis once per tick, not once per wake-up.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

import anyio

from cogworker_async.jobs import wire
from cogworker_async.jobs.definition import JobDefinition
from cogworker_async.jobs.periodic import STARTUP_WINDOW, Periodic, tick_to_claim
from cogworker_async.redis.errors import Unavailable
from cogworker_async.redis.store import Store
from cogworker_async.worker.streak import Streak

log = logging.getLogger(__name__)

MAX_SLEEP: Final = 1.0
"""The ticker looks at the clock at least this often (seconds)."""
TICK_GRACE: Final = 5.0
"""A schedule never claimed before claims a tick at most this old (else its next)."""
MAX_PERIODIC_BYTES: Final = 64 * 1024
"""Largest raw job a periodic tick enqueues (it has no arguments: far more than enough)."""

class BuildRaw(Protocol):
    """(periodic, tick[, jid]) -> (queue, raw job) to enqueue for that tick."""

    def __call__(self, periodic: Periodic, tick: float, jid: str | None = None,
                 ) -> tuple[str, bytes]: ...


def periodic_job(registry: Mapping[str, JobDefinition], periodic: Periodic,
                 tick: float, jid: str | None = None) -> tuple[str, bytes]:
    """The job a periodic tick enqueues: its queue and raw payload (a fresh jid unless
    ``jid``)."""
    definition = registry[periodic.name]
    options = definition.options
    now = time.time()
    payload = wire.build(definition.name, [], {}, queue=options.queue, retry=options.retry,
                        jid=jid,
                        now=now, expires_at=options.deadline(now),
                        dead_on_expiry=options.dead_on_expiry, priority=options.priority,
                        group=options.group)
    payload["periodic"] = periodic.name
    payload["periodic_tick"] = tick
    return options.queue, wire.encode(payload, MAX_PERIODIC_BYTES)


class CronTicker:
    def __init__(self, store: Store, periodics: Sequence[Periodic], build: BuildRaw) -> None:
        self.store = store
        self.periodics = list(periodics)
        self.build = build
        self.claimed: dict[str, float] = {}
        self.streak = Streak("cron: ticking")
        self.started = False
        """Whether the ``run_at_startup`` runs were seen to (an outage: tried again)."""
        self.owner = secrets.token_hex(8)
        """This ticker, as its startup locks' holder (never released: outlived)."""

    async def run(self) -> None:
        if not self.periodics:
            return
        while True:
            try:
                if not self.started:
                    await self.run_at_startup(time.time())
                    self.started = True
                if not self.claimed:
                    for queue in {self.build(p, 0.0)[0] for p in self.periodics}:
                        self.claimed.update(await self.store.cron_claimed(queue))
                await self.tick(time.time())
            except Exception as exc:  # one bad pass must never stop the ticker
                self.streak.failed(exc, trace=not isinstance(exc, Unavailable))
            else:
                self.streak.succeeded()
            await anyio.sleep(self._sleep(time.time()))

    async def tick(self, now: float) -> int:
        """Claim every due tick; returns how many this process enqueued."""
        enqueued = 0
        for periodic in self.periodics:
            tick = tick_to_claim(periodic, now, self.claimed.get(periodic.name), TICK_GRACE)
            if tick is None:
                continue
            queue, raw = self.build(periodic, tick)
            claimed, before = await self.store.cron_claim(periodic.name, tick, queue, raw)
            if claimed:
                enqueued += 1
                log.info("cron: enqueued %s for %s", periodic.name, _stamp(tick))
                missed = missed_ticks(periodic, before, tick)
                if missed:
                    # By design only the latest due tick runs (one catch-up run, not a
                    # flood); a tick nobody claimed is said, so that a gap in a
                    # schedule's runs is never silent.
                    log.warning("cron: %s missed %s tick(s) between %s and %s: no worker "
                                "process ticked in time (all busy, stalled or down); "
                                "ran the latest only", periodic.name,
                                f"{missed}+" if missed >= MAX_COUNTED else missed,
                                _stamp(before or tick), _stamp(tick))
            self.claimed[periodic.name] = tick
        return enqueued

    async def run_at_startup(self, now: float) -> int:
        """Enqueue each ``run_at_startup`` job once for this start; returns how many
        this process enqueued. The first process takes the job's startup lock for
        ``STARTUP_WINDOW``; every process starting meanwhile (a fleet started together)
        reads who holds it and enqueues the run as ``<name>:startup:<holder>`` in the
        mode that refuses a jid ever enqueued: one run per holder, whichever process
        pushes it — a retry after a failed or unanswered push never doubles it, and a
        holder that died between its lock and its push loses nothing (the next process
        to start in the window pushes it for it). Not a tick: the schedule's ticks are
        claimed as ever."""
        enqueued = 0
        for periodic in self.periodics:
            if not periodic.run_at_startup:
                continue
            queue, _ = self.build(periodic, now)
            holder = await self._startup_holder(self.store.keys.cron_startup(queue,
                                                                              periodic.name))
            if holder is None:
                continue
            jid = f"{periodic.name}:startup:{holder}"
            queue, raw = self.build(periodic, now, jid)
            if await self.store.enqueue(queue, [raw], jids=[jid], chosen="once") < 0:
                continue  # enqueued for this holder already (by another, or a try of ours)
            enqueued += 1
            log.info("cron: enqueued %s at startup (run_at_startup)", periodic.name)
        return enqueued

    async def _startup_holder(self, lock: str) -> str | None:
        """Who holds the startup ``lock``: this ticker if it is free (taken now), else
        its holder. None only if it kept expiring between the two looks."""
        for _ in range(3):
            if await self.store.take_lock(lock, self.owner, STARTUP_WINDOW):
                return self.owner
            holder = await self.store.lock_holder(lock)
            if holder is not None:
                return holder
        return None

    def _sleep(self, now: float) -> float:
        soonest = min(p.next_tick(now) for p in self.periodics)
        return max(0.01, min(MAX_SLEEP, soonest - now + 0.005))


MAX_COUNTED: Final = 1000
"""Missed ticks are counted up to this many (a schedule down for a year is not iterated)."""


def missed_ticks(periodic: Periodic, before: float | None, tick: float) -> int:
    """How many ticks of ``periodic`` fell strictly between ``before`` and ``tick``."""
    if before is None:
        return 0
    count, at = 0, periodic.next_tick(before)
    while at < tick and count < MAX_COUNTED:
        count, at = count + 1, periodic.next_tick(at)
    return count


def _stamp(tick: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(tick))
