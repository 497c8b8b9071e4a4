"""Periodic jobs: cron schedules, pure (croniter does the calendar).

    @jobs.periodic("*/5 * * * *")            # five fields; a sixth is seconds
    async def cleanup() -> None: ...

Each tick is enqueued exactly once however many worker processes run (claimed in Redis
by ``cron_claim.lua``, no leader); a run that would overlap the previous one is skipped
and logged (a running lock per periodic job); after an outage there is one catch-up run
for the latest missed tick, not a flood; a new schedule starts at its next tick.
``run_at_startup=True`` (arq's): one run more when the workers start, shared by the
processes that start within ``STARTUP_WINDOW`` of each other (``worker/cron.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Final
from zoneinfo import ZoneInfo

TICK_EPSILON: Final = 0.001
STARTUP_WINDOW: Final = 60.0
"""Seconds during which processes starting after the first share its ``run_at_startup``
run: a fleet started (or rolled) together runs it once; a worker started later, again —
a process recycled by ``--max-jobs``/``--max-memory`` later than this after the first
start counts as a start too (arq's runs at every worker start)."""
RUNNING_LOCK_TTL: Final = 3600.0
"""Seconds a periodic job's running lock lives at most (a crashed run frees it then)."""


def parse_tz(tz: str | tzinfo | None) -> tzinfo:
    if tz is None:
        return UTC
    if isinstance(tz, str):
        return ZoneInfo(tz)
    return tz


@dataclass(frozen=True, slots=True)
class Periodic:
    """A registered periodic job: which job, on which cron schedule, in which timezone."""

    name: str
    schedule: str
    tz: tzinfo
    run_at_startup: bool = False
    """Also enqueued once when the workers start (``STARTUP_WINDOW``)."""

    def __post_init__(self) -> None:
        from croniter import croniter  # loaded by the first periodic job, not at start

        if not isinstance(self.run_at_startup, bool):
            raise TypeError(f"run_at_startup must be True or False, not {self.run_at_startup!r}")

        if not isinstance(self.schedule, str) or not croniter.is_valid(self.schedule):
            raise ValueError(f"invalid cron schedule {self.schedule!r} for {self.name}")

    def latest_tick(self, now: float) -> float:
        """The latest tick at or before ``now`` (epoch s)."""
        # get_prev is strictly before its start: start a hair after now so that a
        # tick exactly now counts as due.
        start = datetime.fromtimestamp(now + TICK_EPSILON, self.tz)
        from croniter import croniter

        return float(croniter(self.schedule, start).get_prev(float))

    def next_tick(self, now: float) -> float:
        """The first tick after ``now`` (epoch s)."""
        from croniter import croniter

        return float(croniter(self.schedule, datetime.fromtimestamp(now, self.tz))
                     .get_next(float))


def tick_to_claim(periodic: Periodic, now: float, last_claimed: float | None,
                  grace: float) -> float | None:
    """Which tick (if any) to try to claim now.

    The latest due tick, if it is newer than the last claimed one. A schedule never
    claimed before only claims a tick that is at most ``grace`` seconds old: it starts
    at its next tick instead of running at once for a tick long past.
    """
    tick = periodic.latest_tick(now)
    if last_claimed is not None:
        return tick if tick > last_claimed else None
    return tick if now - tick <= grace else None
