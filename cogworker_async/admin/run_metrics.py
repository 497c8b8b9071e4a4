"""The run metrics' read model (Sidekiq 7's ``Metrics::Query``): per job class over a
window of minutes — runs, failures, total and mean run time, p50/p95 — and one job's
per-minute series with its run-time histogram, for the Metrics tab and
``cogworker-async metrics-summary``.

    summary = await insp.metrics.summary(window_minutes=60)
    for row in summary.jobs:                      # most total run time first
        print(row.name, row.runs, row.failed, row.total_ms, row.p95_ms)
    series = await insp.metrics.job("reports.build", window_minutes=240)

The workers write one hash per minute (``cogworker_async/observe/run_metrics.py`` holds the
format); a read is one pipeline of ``window`` HGETALLs (at most ``MAX_WINDOW_MINUTES``,
480), so it is bounded however many jobs ran. The arithmetic (``summarize``,
``job_series``) is pure and apart from the read.

Minutes are the workers' own clocks' (``ended_at // 60``) and read against this
process's clock: a skew of seconds between hosts moves a run into its neighbour minute,
never out of a window it ended well within. The newest minute is still filling.
Percentiles come from the histogram's buckets (1-2-5 steps): within a bucket of the
truth, which is what a chart needs and all that a bounded store can give.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from cogworker_async.observe.run_metrics import (
    BUCKET_BOUNDS_MS,
    MAX_WINDOW_MINUTES,
    SECONDS_PER_MINUTE,
    JobMinute,
    minute_of,
    parse,
    summed,
)

if TYPE_CHECKING:
    from cogworker_async.admin.base import InspectorView

DEFAULT_WINDOW_MINUTES: Final = 60
"""The window shown unless another is asked for: the last hour."""
TOP_JOBS: Final = 5
"""Jobs the overview's per-minute chart draws (the most total run time first)."""
MEDIAN: Final = 0.5
P95: Final = 0.95
MS_PER_SECOND: Final = 1000.0
SECONDS_PER_HOUR: Final = 3600.0
FRACTION_BELOW: Final = 10.0
"""Run times under this many of their unit are shown with a decimal (``2.5 ms``)."""


def check_window(minutes: object) -> int:
    """``minutes`` as a window length, or a ValueError saying what is allowed."""
    if (isinstance(minutes, bool) or not isinstance(minutes, int)
            or not 1 <= minutes <= MAX_WINDOW_MINUTES):
        raise ValueError(f"the metrics window is 1..{MAX_WINDOW_MINUTES} minutes "
                         f"(8 hours), got {minutes!r}")
    return minutes


def window_of(window_minutes: int, now: float) -> list[int]:
    """The minutes of the window that ends with ``now``'s minute, oldest first."""
    last = minute_of(now)
    return list(range(last - window_minutes + 1, last + 1))


@dataclass(frozen=True, slots=True)
class JobTotals:
    """One job class over a window (or one minute): times in milliseconds, None when
    it did not run."""

    name: str
    runs: int
    failed: int
    total_ms: float
    mean_ms: float | None
    p50_ms: float | None
    p95_ms: float | None

    @classmethod
    def of(cls, name: str, entry: JobMinute) -> JobTotals:
        return cls(name=name, runs=entry.runs, failed=entry.failed, total_ms=entry.ms,
                   mean_ms=entry.mean_ms, p50_ms=entry.percentile(MEDIAN),
                   p95_ms=entry.percentile(P95))


@dataclass(frozen=True, slots=True)
class Series:
    """One job's runs and run time per minute of a window (the overview's chart)."""

    name: str
    runs: tuple[int, ...]
    total_ms: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class MetricsSummary:
    """Every job class that ran in the window, most total run time first."""

    window_minutes: int
    minutes: tuple[int, ...]
    """The window's minutes (epoch seconds // 60), oldest first; the last one is filling."""
    jobs: tuple[JobTotals, ...]
    top: tuple[Series, ...]
    """Per minute, the ``TOP_JOBS`` jobs of ``jobs`` with the most total run time."""

    @property
    def starts_at(self) -> float:
        return float(self.minutes[0] * SECONDS_PER_MINUTE)

    def as_dict(self) -> dict[str, Any]:
        return {"window_minutes": self.window_minutes, "starts_at": self.starts_at,
                "minutes": [m * SECONDS_PER_MINUTE for m in self.minutes],
                "jobs": [dataclasses.asdict(job) for job in self.jobs],
                "top": [dataclasses.asdict(series) for series in self.top]}


@dataclass(frozen=True, slots=True)
class MinuteStats:
    """One job in one minute: its totals and its run-time histogram (counts per
    bucket of ``BUCKET_BOUNDS_MS``, then the open-ended bucket past the last bound)."""

    at: float
    """Epoch seconds the minute starts."""
    totals: JobTotals
    histogram: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        totals = dataclasses.asdict(self.totals)
        del totals["name"]
        return {"at": self.at, **totals, "histogram": list(self.histogram)}


@dataclass(frozen=True, slots=True)
class JobMetrics:
    """One job class over a window: its totals, and each minute (oldest first, minutes
    without a run included, so that a chart's x axis is time)."""

    name: str
    window_minutes: int
    totals: JobTotals
    histogram: tuple[int, ...]
    """The window's histogram (every minute's added up)."""
    minutes: tuple[MinuteStats, ...]

    @property
    def starts_at(self) -> float:
        return self.minutes[0].at

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "window_minutes": self.window_minutes,
                "starts_at": self.starts_at, "totals": dataclasses.asdict(self.totals),
                "bucket_bounds_ms": list(BUCKET_BOUNDS_MS), "histogram": list(self.histogram),
                "minutes": [minute.as_dict() for minute in self.minutes]}


# -- the arithmetic (pure) ---------------------------------------------------------------


def summarize(window_minutes: int, minutes: Sequence[int],
              parsed: Sequence[Mapping[str, JobMinute]], top: int = TOP_JOBS) -> MetricsSummary:
    """The overview of ``parsed`` (one ``run_metrics.parse`` result per minute)."""
    totals = summed(parsed)
    # Most time first (where the workers' time went), then most runs; the name last,
    # so that equal rows keep one order from one read to the next.
    order = sorted(totals, key=lambda name: (-totals[name].ms, -totals[name].runs, name))
    top_series = tuple(
        Series(name,
               runs=tuple(minute[name].runs if name in minute else 0 for minute in parsed),
               total_ms=tuple(minute[name].ms if name in minute else 0.0 for minute in parsed))
        for name in order[:top])
    return MetricsSummary(window_minutes, tuple(minutes),
                          tuple(JobTotals.of(name, totals[name]) for name in order), top_series)


def job_series(name: str, window_minutes: int, minutes: Sequence[int],
               parsed: Sequence[Mapping[str, JobMinute]]) -> JobMetrics:
    """One job's minutes and totals out of ``parsed`` (as for ``summarize``)."""
    entries = [minute.get(name) or JobMinute() for minute in parsed]
    total = JobMinute()
    for entry in entries:
        total.add(entry)
    return JobMetrics(
        name=name, window_minutes=window_minutes, totals=JobTotals.of(name, total),
        histogram=tuple(total.histogram),
        minutes=tuple(MinuteStats(at=float(minute * SECONDS_PER_MINUTE),
                                  totals=JobTotals.of(name, entry),
                                  histogram=tuple(entry.histogram))
                      for minute, entry in zip(minutes, entries, strict=True)))


def bucket_labels() -> list[str]:
    """A person's name for each histogram bucket: ``≤ 5 ms`` ... ``> 30 min``."""
    return ([f"≤ {run_time(bound)}" for bound in BUCKET_BOUNDS_MS]
            + [f"> {run_time(BUCKET_BOUNDS_MS[-1])}"])


def run_time(ms: float | None) -> str:
    """A run time for a table: ``0.4 ms``, ``35 ms``, ``1.2 s``, ``3 min``, ``1.5 h``;
    ``–`` for none (no runs)."""
    if ms is None:
        return "–"
    for unit, size in (("h", SECONDS_PER_HOUR * MS_PER_SECOND),
                       ("min", SECONDS_PER_MINUTE * MS_PER_SECOND), ("s", MS_PER_SECOND)):
        if ms >= size:
            return f"{_number(ms / size)} {unit}"
    return f"{_number(ms)} ms"


def _number(value: float) -> str:
    """One decimal under ``FRACTION_BELOW`` (none when it is 0: ``2 s``, not ``2.0 s``)."""
    rounded = round(value, 1)
    return f"{rounded:g}" if rounded < FRACTION_BELOW else f"{value:.0f}"


# -- the read ----------------------------------------------------------------------------


class RunMetrics:
    """What the workers recorded of each run, per job class and minute (``insp.metrics``)."""

    def __init__(self, inspector: InspectorView) -> None:
        self._inspector = inspector

    async def _read(self, window_minutes: int,
                    now: float | None) -> tuple[list[int], list[dict[str, JobMinute]]]:
        minutes = window_of(check_window(window_minutes),
                            time.time() if now is None else now)
        stored = await self._inspector.app._store().run_metrics(minutes)
        return minutes, [parse(fields) for fields in stored]

    async def summary(self, window_minutes: int = DEFAULT_WINDOW_MINUTES,
                      now: float | None = None) -> MetricsSummary:
        """Every job class that ran in the last ``window_minutes`` minutes (the one
        ``now`` falls in included; 1..``MAX_WINDOW_MINUTES``), most total time first."""
        minutes, parsed = await self._read(window_minutes, now)
        return summarize(window_minutes, minutes, parsed)

    async def job(self, name: str, window_minutes: int = DEFAULT_WINDOW_MINUTES,
                  now: float | None = None) -> JobMetrics:
        """One job class's minutes over the window (empty ones included)."""
        minutes, parsed = await self._read(window_minutes, now)
        return job_series(name, window_minutes, minutes, parsed)
