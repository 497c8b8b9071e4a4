"""Stats flush: the processed/failed counts and the run metrics, sent to Redis in numbered
flushes — each counted once, whatever replies are lost.

Every ``STATS_FLUSH_INTERVAL`` the counts gathered since the last flush are taken out of
the counters (``execute.Counters``) and the tally (``run_metrics.Tally``) into one
``StatsFlush``, numbered per run of the process (``flusher``: an identity may be
configured, and reused by the next run, whose numbers start at 1 again). A flush that
fails, or is cancelled, is kept (``unconfirmed``) and sent again as it was, under its
number, before anything newer: Redis applies each number once (``add_stats.lua``). The
shutdown's hand-over flushes a last time (``shutdown.py``).
"""

from __future__ import annotations

import secrets
from typing import Final

import anyio

from cogworker_async.observe.run_metrics import Tally
from cogworker_async.redis.errors import Unavailable
from cogworker_async.redis.store import StatsFlush, Store
from cogworker_async.worker.execute import Counters
from cogworker_async.worker.streak import Streak

STATS_FLUSH_INTERVAL: Final = 1.0


class StatsFlusher:
    """Sends ``counters`` and ``tally`` in numbered flushes; ``streak`` says once that
    flushing fails, and once that it recovered."""

    def __init__(self, store: Store, identity: str, counters: Counters, tally: Tally,
                 streak: Streak) -> None:
        self.store = store
        self.counters = counters
        self.tally = tally
        self.streak = streak
        self.flushes = 0
        """The number of the last flush taken out of the counters."""
        self.flusher = f"{identity}:{secrets.token_hex(4)}"
        """Whose flush numbers these are: this run of the process (an identity may be
        configured, and reused by the next run, whose numbers start at 1 again)."""
        self.unconfirmed: StatsFlush | None = None
        """A stats flush not known to be applied: sent again, as it is, next time."""

    async def run(self) -> None:
        """Flush every ``STATS_FLUSH_INTERVAL``, forever (an upkeep task)."""
        while True:
            await anyio.sleep(STATS_FLUSH_INTERVAL)
            await self.flush()

    async def flush(self) -> None:
        """Send the counts and run metrics gathered since the last flush. A flush that
        fails (or is cancelled: the shutdown's hand-over flushes again) is kept and sent
        again as it was, under its number, before anything newer: Redis applies each
        number once (``add_stats.lua``), so a lost reply never counts twice."""
        flush = self.unconfirmed
        if flush is None:
            counters = self.counters
            processed, failed = counters.processed, counters.failed
            if not processed and not failed and not self.tally:
                return
            self.flushes += 1
            flush = self.unconfirmed = StatsFlush(self.flushes, processed, failed,
                                                  self.tally.take())
            counters.processed -= processed
            counters.failed -= failed
        try:
            await self.store.flush_stats(self.flusher, flush)
        except Exception as exc:  # kept for the next flush (a bug: shown once, traced)
            self.streak.failed(exc, trace=not isinstance(exc, Unavailable))
            return
        self.unconfirmed = None
        self.streak.succeeded()

    async def flush_all(self) -> None:
        """The last flush (shutdown): an older flush sent again first, then the rest."""
        await self.flush()
        if self.unconfirmed is None:  # that was an older flush sent again: now the rest
            await self.flush()
