"""Run metrics: per job, per minute — runs, failures, run time and a run-time histogram.

What the Metrics tab and ``cogworker-async metrics-summary`` show (Sidekiq 7's metrics,
in the same spirit). Each worker adds its runs up in memory (``Tally``) and writes them
with its stats flush, once a second: one pipeline per flush, never one write per job.

Stored in the namespace's slot, one hash per minute (``Keys.run_metrics(minute)``,
``minute`` = epoch seconds // 60), kept ``RETENTION`` seconds. Its fields, per job name:

- ``<name>|runs``: runs that finished (succeeded or failed);
- ``<name>|failed``: of which failed;
- ``<name>|us``: their total run time, whole microseconds (so that a flood of
  sub-millisecond runs still adds up);
- ``<name>|h<i>``: runs whose time fell in bucket ``i`` (``BUCKET_BOUNDS_MS``).

A job name may itself hold ``|``: a field is split at its last one. Memory is bounded by
(jobs run in a minute) x (fields per job) x (minutes kept).

This module is pure (no I/O): the format, the in-memory tally and the arithmetic the
readers use (totals, percentiles from the histogram).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from cogworker_async.jobs import stored

BUCKET_BOUNDS_MS: Final = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000,
                           30_000, 60_000, 300_000, 1_800_000)
"""Upper bounds (inclusive, milliseconds) of the run-time buckets; one more bucket holds
everything longer. Roughly 1-2-5 steps: a percentile read off them is within a bucket."""

BUCKETS: Final = len(BUCKET_BOUNDS_MS) + 1

RETENTION: Final = 9 * 3600
"""Seconds a minute's hash is kept: the longest window shown (8 hours) and an hour's slack."""

MAX_WINDOW_MINUTES: Final = 8 * 60
"""The longest window a reader may ask for."""

SECONDS_PER_MINUTE: Final = 60

SEPARATOR: Final = "|"


def minute_of(epoch: float) -> int:
    """The minute bucket ``epoch`` falls in."""
    return int(epoch // SECONDS_PER_MINUTE)


def bucket_of(ms: float) -> int:
    """The histogram bucket of a run of ``ms`` milliseconds."""
    return bisect.bisect_left(BUCKET_BOUNDS_MS, ms)


def field_of(name: str, what: str) -> str:
    return f"{name}{SEPARATOR}{what}"


@dataclass(slots=True)
class JobMinute:
    """One job's runs within one minute (or summed over several)."""

    runs: int = 0
    failed: int = 0
    us: int = 0
    """Total run time, microseconds."""
    histogram: list[int] = field(default_factory=lambda: [0] * BUCKETS)

    def add(self, other: JobMinute) -> None:
        self.runs += other.runs
        self.failed += other.failed
        self.us += other.us
        for index, count in enumerate(other.histogram):
            self.histogram[index] += count

    @property
    def ms(self) -> float:
        """Total run time, milliseconds."""
        return self.us / 1000

    @property
    def mean_ms(self) -> float | None:
        return self.ms / self.runs if self.runs else None

    def percentile(self, fraction: float) -> float | None:
        """The run time (ms) below which ``fraction`` of the runs fell, interpolated
        within its bucket; None without runs. The open-ended last bucket answers its
        lower bound (all that is known of it)."""
        total = sum(self.histogram)
        if not total:
            return None
        rank = fraction * total
        seen = 0
        for index, count in enumerate(self.histogram):
            if count and seen + count >= rank:
                low = BUCKET_BOUNDS_MS[index - 1] if index else 0
                if index >= len(BUCKET_BOUNDS_MS):
                    return float(low)
                high = BUCKET_BOUNDS_MS[index]
                return low + (high - low) * max(0.0, rank - seen) / count
            seen += count
        return float(BUCKET_BOUNDS_MS[-1])

    def fields(self, name: str) -> dict[str, int]:
        """This entry as hash increments (zero counts left out)."""
        out = {field_of(name, "runs"): self.runs, field_of(name, "failed"): self.failed,
               field_of(name, "us"): self.us}
        out.update({field_of(name, f"h{index}"): count
                    for index, count in enumerate(self.histogram) if count})
        return {key: value for key, value in out.items() if value}


class Tally:
    """This process's runs since the last flush, by (minute, job name)."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[tuple[int, str], JobMinute] = {}

    def add(self, name: str, *, ended_at: float, seconds: float, failed: bool) -> None:
        """One finished run of ``name`` that took ``seconds`` and ended at ``ended_at``."""
        key = (minute_of(ended_at), name)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = JobMinute()
        ms = seconds * 1000.0
        entry.runs += 1
        entry.failed += failed
        entry.us += round(ms * 1000)
        entry.histogram[bucket_of(ms)] += 1

    def take(self) -> dict[int, dict[str, int]]:
        """What to write, as ``{minute: {field: increment}}``, emptying the tally."""
        entries, self.entries = self.entries, {}
        out: dict[int, dict[str, int]] = {}
        for (minute, name), entry in entries.items():
            out.setdefault(minute, {}).update(entry.fields(name))
        return out

    def __bool__(self) -> bool:
        return bool(self.entries)


def parse(fields: Mapping[str, int] | Mapping[bytes, bytes]) -> dict[str, JobMinute]:
    """One minute's hash (as stored, or as ``Tally.take`` builds it), by job name.
    Fields that are not this format's are skipped (nothing here is worth failing a page)."""
    out: dict[str, JobMinute] = {}
    for raw_key, raw_value in fields.items():
        key = raw_key.decode("utf-8", "replace") if isinstance(raw_key, bytes) else raw_key
        name, sep, what = key.rpartition(SEPARATOR)
        value = stored.integer(raw_value)  # huge, infinite, not a number: skipped
        if value is None or not sep:
            continue
        entry = out.get(name)
        if entry is None:
            entry = out[name] = JobMinute()
        _apply(entry, what, value)
    return out


def _apply(entry: JobMinute, what: str, value: int) -> None:
    if what == "runs":
        entry.runs += value
    elif what == "failed":
        entry.failed += value
    elif what == "us":
        entry.us += value
    elif what.startswith("h") and what[1:].isdigit() and int(what[1:]) < BUCKETS:
        entry.histogram[int(what[1:])] += value


def summed(minutes: Iterable[Mapping[str, JobMinute]]) -> dict[str, JobMinute]:
    """Per job, the sum over ``minutes`` (each as ``parse`` returns it)."""
    out: dict[str, JobMinute] = {}
    for minute in minutes:
        for name, entry in minute.items():
            total = out.get(name)
            if total is None:
                total = out[name] = JobMinute()
            total.add(entry)
    return out
