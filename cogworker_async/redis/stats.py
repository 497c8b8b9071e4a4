"""Stats: the processed and failed totals, each day's counts, and the run metrics a
worker's numbered flushes add to (``worker/stats_flush``), each flush applied once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cogworker_async.observe import run_metrics
from cogworker_async.redis.part import Part, wrong_type

HISTORY_TTL: Final = 366 * 24 * 3600
"""Seconds a day's processed/failed counts are kept (a year of history)."""
FLUSH_NUMBER_TTL: Final = 3600
"""Seconds a process's last applied stats flush number is kept: far longer than a
flush is ever retried (a worker retries its unconfirmed flush every second)."""


@dataclass(frozen=True, slots=True)
class StatsFlush:
    """One stats flush of a worker (``Store.flush_stats``): numbered, so that it can be
    sent again after a lost reply and still count once."""

    number: int
    processed: int
    failed: int
    runs: Mapping[int, Mapping[str, int]]
    """Run metrics: ``{minute: {field: increment}}`` (``run_metrics.Tally.take``)."""




class StatsPart(Part):
    async def add_stats(self, processed: int, failed: int) -> None:
        """Add to the totals and to today's counts (UTC; kept ``HISTORY_TTL``). Not safe
        to repeat after a lost reply: a worker's flush uses ``flush_stats``."""
        day = time.strftime("%Y-%m-%d", time.gmtime())
        async with self.client.pipeline(transaction=False) as pipe:
            for count, total, daily in ((processed, self.keys.stats_processed,
                                         self.keys.stats_processed_on(day)),
                                        (failed, self.keys.stats_failed,
                                         self.keys.stats_failed_on(day))):
                if count:
                    pipe.incrby(total, count)
                    pipe.incrby(daily, count)
                    pipe.expire(daily, HISTORY_TTL)
            await pipe.execute()

    async def flush_stats(self, flusher: str, flush: StatsFlush) -> bool:
        """Apply one of ``flusher``'s stats flushes — totals, today's counts and the run
        metrics — at most once (``add_stats.lua``): after a lost reply, send the same
        flush again. False if it had been applied already. ``flusher`` names one run of
        one process (numbers start at 1 in each)."""
        keys = self.keys
        day = time.strftime("%Y-%m-%d", time.gmtime())
        names = [keys.stats_flushed(flusher), keys.stats_processed,
                 keys.stats_processed_on(day), keys.stats_failed, keys.stats_failed_on(day)]
        args: list[Any] = [flush.number, flush.processed, flush.failed, HISTORY_TTL,
                           run_metrics.RETENTION, FLUSH_NUMBER_TTL]
        for minute, fields in flush.runs.items():
            names.append(keys.run_metrics(minute))
            args.append(len(fields))
            for name, increment in fields.items():
                args += [name, increment]
        return int(await self.scripts.run("add_stats", names, args)) == 1

    async def run_metrics(self, minutes: Sequence[int]) -> list[dict[bytes, bytes]]:
        """The stored run metrics of each of ``minutes`` (an empty dict where none)."""
        if not minutes:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for minute in minutes:
                pipe.hgetall(self.keys.run_metrics(minute))
            replies = await pipe.execute(raise_on_error=False)
        for reply in replies:  # an outage is no empty minute: raised as it would be
            if isinstance(reply, Exception) and not wrong_type(reply):
                raise reply
        # A minute's key of another type (a co-tenant's) reads as a minute without runs.
        return [dict(reply) if isinstance(reply, dict) else {} for reply in replies]

