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

from cogworker_async.admin.records import printable

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


def plural(count: int, word: str, words: str | None = None) -> str:
    """``1 job``, ``3 jobs``, ``1,000 jobs``; ``words``: the plural, when it is not
    ``word`` and an s (``batches``)."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"


def pretty(value: Any) -> str:
    """A value as indented JSON (for the job page's ``<pre>``; escaped by the template)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=repr)


SHOWN_BYTES: Final = 4096
"""Bytes of a value's pretty JSON a page shows (a job's arguments): the rest is cut,
and the page says how large the whole is. A job may carry up to ``max_payload_bytes``
(512 KiB by default), which would make a page of megabytes."""


@dataclass(frozen=True, slots=True)
class Capped:
    """A value's pretty JSON, cut at a size: what a page shows of it."""

    text: str
    total_bytes: int
    """Size of the whole pretty JSON (UTF-8)."""
    shown_bytes: int

    @property
    def cut(self) -> bool:
        return self.shown_bytes < self.total_bytes


def capped(value: Any, limit: int = SHOWN_BYTES) -> Capped:
    """``value`` as ``pretty`` JSON, its first ``limit`` bytes (never half a character)."""
    # A lone surrogate (JSON's "\ud800") cannot be encoded: U+FFFD, as every page shows it.
    whole = printable(pretty(value)).encode("utf-8")
    if len(whole) <= limit:
        return Capped(whole.decode("utf-8"), len(whole), len(whole))
    text = whole[:limit].decode("utf-8", "ignore")  # a character cut in two: left out
    return Capped(text, len(whole), len(text.encode("utf-8")))


BRIEF_CHARS: Final = 80
"""Characters of a job's progress ``info`` shown in a Busy row (the job page has all)."""


def brief(value: Any, limit: int = BRIEF_CHARS) -> str:
    """A JSON value on one short line: a string as it is, anything else as compact
    JSON, cut at ``limit`` characters with an ellipsis."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(
        value, ensure_ascii=False, separators=(", ", ": "), default=repr)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def percent(fraction: float | None) -> str:
    """A progress fraction as a whole percentage: ``42%`` (``–`` when none). Never
    "100%" before the end: 0.999 reads "99%"."""
    if fraction is None or not math.isfinite(fraction):
        return "–"
    return f"{math.floor(max(0.0, min(1.0, fraction)) * 100)}%"


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


# -- the Metrics tab's charts (SVG drawn by the server: no script, nothing inline) ------

LINE_CHART_HEIGHT: Final = 160.0
LINE_MARGIN: Final = 2.0
"""Units kept clear at the top and bottom of a line chart, for the stroke."""
DOT_HALF_WIDTH: Final = 2.0
"""Half the width (at least) of the dash drawn for a lone point: a line of one point
shows nothing."""
SCALE_STEPS: Final = (1, 2, 5, 10)
HEAT_ROW_HEIGHT: Final = 18
"""Height of a heat map row, in pixels: the labels beside it (CSS) use the same."""
HEAT_FAINTEST: Final = 0.12
"""Opacity of a cell holding the fewest runs (one): still visible against the paper."""


def nice_top(peak: float) -> float:
    """The round number (1, 2 or 5 times a power of ten) at or above ``peak``: the top
    of a chart reads at a glance, as on the live graph."""
    if peak <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(peak))
    return float(next(step * power for step in SCALE_STEPS if step * power >= peak))


@dataclass(frozen=True, slots=True)
class Line:
    """One series of a line chart: its label, its CSS class (the colour), and its
    polylines (a gap where it has no value: a minute without runs has no run time)."""

    label: str
    css: str
    segments: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LineChart:
    lines: tuple[Line, ...]
    top: float
    """The value at the top of the chart."""


def line_chart(series: Sequence[tuple[str, Sequence[float | None]]], *,
               css: Sequence[str] = ()) -> LineChart:
    """Series of equal length as polylines in a ``viewBox`` 600 × 160, scaled together
    to a round top. ``css``: each series' class (else ``s0``, ``s1``, ...)."""
    values = [v for _, points in series for v in points if v is not None]
    top = nice_top(max(values, default=0.0))
    return LineChart(tuple(
        Line(label, css[index] if index < len(css) else f"s{index}", _segments(points, top))
        for index, (label, points) in enumerate(series)), top)


def _segments(values: Sequence[float | None], top: float) -> tuple[str, ...]:
    """A series' polylines, broken where it has no value."""
    step = CHART_WIDTH / max(1, len(values) - 1)
    scale = (LINE_CHART_HEIGHT - 2 * LINE_MARGIN) / top
    segments: list[list[tuple[float, float]]] = [[]]
    for i, value in enumerate(values):
        if value is None:
            segments.append([])
        else:
            segments[-1].append((i * step, LINE_CHART_HEIGHT - LINE_MARGIN - value * scale))
    half = max(DOT_HALF_WIDTH, step / 2)
    return tuple(_polyline(points, half) for points in segments if points)


def _polyline(points: list[tuple[float, float]], half: float) -> str:
    if len(points) == 1:  # a dash across its minute, kept within the chart
        (x, y), = points
        left = min(max(0.0, x - half), CHART_WIDTH - 2 * half)
        points = [(left, y), (left + 2 * half, y)]
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


@dataclass(frozen=True, slots=True)
class Cell:
    """One minute × one run-time bucket of a heat map, in the SVG's units."""

    x: float
    y: float
    width: float
    opacity: float
    count: int
    minute: int
    """Index of the minute in the window."""
    bucket: int


@dataclass(frozen=True, slots=True)
class HeatMap:
    """Runs per minute (columns) and run-time bucket (rows, slowest at the top)."""

    cells: tuple[Cell, ...]
    rows: tuple[int, ...]
    """The buckets shown, top row first: from the slowest used to the fastest used."""
    peak: int

    @property
    def height(self) -> int:
        return len(self.rows) * HEAT_ROW_HEIGHT

    @property
    def row_height(self) -> int:
        return HEAT_ROW_HEIGHT


def heat_map(histograms: Sequence[Sequence[int]]) -> HeatMap:
    """Per-minute histograms as a heat map ``CHART_WIDTH`` wide, a row of
    ``HEAT_ROW_HEIGHT`` per bucket: the darker a cell, the more runs took that long."""
    used = sorted({bucket for histogram in histograms
                   for bucket, count in enumerate(histogram) if count})
    if not used:
        return HeatMap((), (), 0)
    rows = tuple(range(used[-1], used[0] - 1, -1))
    peak = max(count for histogram in histograms for count in histogram)
    width = CHART_WIDTH / max(1, len(histograms))
    cells = tuple(
        Cell(x=minute * width, y=float(rows.index(bucket) * HEAT_ROW_HEIGHT), width=width,
             opacity=HEAT_FAINTEST + (1 - HEAT_FAINTEST) * count / peak, count=count,
             minute=minute, bucket=bucket)
        for minute, histogram in enumerate(histograms)
        for bucket, count in enumerate(histogram) if count)
    return HeatMap(cells, rows, peak)
