"""How the dashboard writes times, durations and sizes: pure functions, used as Jinja
filters. People read "3 s ago" faster than an epoch; the exact UTC time goes in a
``title`` so that it is one hover away.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

MINUTE: Final = 60.0
HOUR: Final = 3600.0
DAY: Final = 86400.0
KIB: Final = 1024.0


def duration(seconds: float | None) -> str:
    """A length of time in its largest sensible unit: ``850 ms``, ``3 s``, ``2 min``,
    ``5 h 10 min``, ``3 d``."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    seconds = abs(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < MINUTE - 0.5:
        return f"{round(seconds)} s"
    minutes = round(seconds / MINUTE)  # rounded: 3,599.9 s reads "1 h", not "59 min"
    if minutes < MINUTE:
        return f"{minutes} min"
    if minutes < DAY / MINUTE:
        hours, minutes = divmod(minutes, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{round(seconds / DAY)} d"


def relative(at: float | None, now: float) -> str:
    """``at`` seen from ``now``: ``3 s ago``, ``in 2 min``, ``now`` (within a second)."""
    if at is None or not math.isfinite(at):
        return "–"
    delta = at - now
    if abs(delta) < 1:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def utc(at: float | None) -> str:
    """The absolute time, for a ``title``: ``2025-11-30 07:00:00 UTC``."""
    if at is None or not math.isfinite(at):
        return ""
    try:
        return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return ""  # a score far outside the calendar: show none rather than fail the page


def size(count: int | float | None) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 MiB``."""
    if count is None:
        return "–"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < KIB:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= KIB
    return f"{value:.1f} TiB"


def backtrace(lines: list[str]) -> str:
    """Traceback lines as one text (each stored line may or may not end its newline)."""
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def na(value: object) -> str:
    """A value Redis may not tell (INFO refused): ``n/a`` for None."""
    return "n/a" if value is None else str(value)


def plural(count: int, word: str) -> str:
    """``1 job``, ``3 jobs``, ``1,000 jobs``."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def pretty(value: Any) -> str:
    """A value as indented JSON (for the job page's ``<pre>``; escaped by the template)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=repr)


@dataclass(frozen=True, slots=True)
class Bar:
    """One day of the history chart, in the SVG's own units (``viewBox`` 600 × 120)."""

    day: str
    processed: int
    failed: int
    x: float
    width: float
    processed_height: float
    failed_height: float


CHART_WIDTH: Final = 600.0
CHART_HEIGHT: Final = 120.0


def bars(history: Sequence[Any]) -> list[Bar]:
    """Day totals as bars scaled to the busiest day: processed, with failed over it."""
    if not history:
        return []
    top = max(max(day.processed, day.failed) for day in history) or 1
    step = CHART_WIDTH / len(history)
    return [Bar(day.day, day.processed, day.failed, x=i * step + step * 0.15,
                width=step * 0.7, processed_height=CHART_HEIGHT * day.processed / top,
                failed_height=CHART_HEIGHT * day.failed / top)
            for i, day in enumerate(history)]
