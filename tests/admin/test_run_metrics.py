"""The Metrics read model against a real server and real worker runs: what the workers
recorded per job class is what the tab and the command show — runs, failures, total
time, percentiles in the right order — and the window is bounded and checked."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import anyio
import pytest

from cogworker_async import App
from cogworker_async.admin import Inspector
from cogworker_async.admin.run_metrics import MetricsSummary
from cogworker_async.observe.run_metrics import BUCKETS, MAX_WINDOW_MINUTES
from tests.waiting import wait_until

FLUSHED: Final = 15.0
"""Seconds the runs may take to run and reach Redis (a flush a second; a busy machine)."""
MEDIUM_S: Final = 0.04
SLOW_S: Final = 0.25
RUNS: Final = {"fast": 20, "medium": 6, "slow": 4, "bad": 3}


async def _ran_everything(insp: Inspector) -> bool:
    summary = await insp.metrics.summary()
    return {row.name: row.runs for row in summary.jobs} == RUNS


@pytest.fixture
async def recorded(make_app: Callable[..., App]) -> Inspector:
    """An App whose worker ran jobs of three durations and one that fails, until their
    runs were flushed to the run metrics."""
    jobs = make_app()

    @jobs.job(name="fast")
    async def fast() -> None:
        pass

    @jobs.job(name="medium")
    async def medium() -> None:
        await anyio.sleep(MEDIUM_S)

    @jobs.job(name="slow")
    async def slow() -> None:
        await anyio.sleep(SLOW_S)

    @jobs.job(name="bad", retry=False)
    async def bad() -> None:
        raise RuntimeError("no")

    for function, name in ((fast, "fast"), (medium, "medium"), (slow, "slow"), (bad, "bad")):
        await function.enqueue_many([((), {})] * RUNS[name])
    insp = Inspector(jobs)
    async with jobs.worker(concurrency=10):
        await wait_until(lambda: _ran_everything(insp), timeout=FLUSHED, every=0.1)
    return insp


async def test_the_summary_counts_runs_failures_and_orders_by_total_time(
    recorded: Inspector,
) -> None:
    summary = await recorded.metrics.summary()
    rows = {row.name: row for row in summary.jobs}
    assert summary.window_minutes == 60
    assert len(summary.minutes) == 60
    # Most total run time first: the four slow runs outweigh everything else.
    assert [row.name for row in summary.jobs[:2]] == ["slow", "medium"]
    assert {name: row.failed for name, row in rows.items()} == {
        "fast": 0, "medium": 0, "slow": 0, "bad": 3}
    assert rows["slow"].total_ms >= RUNS["slow"] * SLOW_S * 1000
    assert rows["medium"].total_ms >= RUNS["medium"] * MEDIUM_S * 1000
    for row in summary.jobs:
        assert row.mean_ms == pytest.approx(row.total_ms / row.runs)
    fast, medium, slow = rows["fast"], rows["medium"], rows["slow"]
    assert fast.p50_ms is not None
    assert medium.p50_ms is not None
    assert slow.p50_ms is not None
    assert fast.p50_ms < medium.p50_ms < slow.p50_ms
    # Read off the histogram: within the bucket holding the true time (1-2-5 steps).
    assert medium.p50_ms >= 20
    assert slow.p50_ms >= 200
    assert all(row.p95_ms is not None and row.p50_ms is not None and row.p95_ms >= row.p50_ms
               for row in summary.jobs)
    # The chart's series: per minute, adding up to the totals.
    series = {s.name: s for s in summary.top}
    assert sum(series["slow"].runs) == RUNS["slow"]
    assert sum(series["slow"].total_ms) == slow.total_ms
    assert len(series["slow"].runs) == 60


async def test_a_job_page_has_each_minute_and_its_histogram(recorded: Inspector) -> None:
    slow = await recorded.metrics.job("slow", window_minutes=120)
    assert len(slow.minutes) == 120
    assert slow.minutes[-1].at <= time.time() < slow.minutes[-1].at + 60
    assert [b.at - a.at for a, b in zip(slow.minutes, slow.minutes[1:], strict=False)] == \
        [60.0] * 119
    assert sum(minute.totals.runs for minute in slow.minutes) == RUNS["slow"]
    assert sum(slow.histogram) == RUNS["slow"]
    assert len(slow.histogram) == BUCKETS
    assert all(sum(m.histogram) == m.totals.runs for m in slow.minutes)
    busy = [m for m in slow.minutes if m.totals.runs]
    assert busy
    assert all(m.totals.p95_ms is not None and m.totals.p95_ms >= 200 for m in busy)
    assert all(m.totals.p95_ms is None and m.totals.mean_ms is None
               for m in slow.minutes if not m.totals.runs)
    summary = await recorded.metrics.summary(window_minutes=120)
    assert next(row for row in summary.jobs if row.name == "slow") == slow.totals
    assert slow.as_dict()["totals"]["runs"] == RUNS["slow"]


async def test_windows_that_hold_none_of_the_runs_are_empty(recorded: Inspector) -> None:
    later = time.time() + 2 * 3600  # the runs are over an hour before this hour's window
    empty = await recorded.metrics.summary(window_minutes=60, now=later)
    assert empty == MetricsSummary(60, empty.minutes, (), ())
    assert (await recorded.metrics.summary(window_minutes=MAX_WINDOW_MINUTES,
                                           now=later)).jobs  # 8 hours reach back to them
    never = await recorded.metrics.job("never ran")
    assert never.totals.runs == 0
    assert never.totals.p50_ms is None
    assert len(never.minutes) == 60


@pytest.mark.parametrize("window", [0, -5, MAX_WINDOW_MINUTES + 1, True, "60", 1.5])
async def test_a_window_outside_one_minute_to_eight_hours_is_refused(
    make_app: Callable[..., App], window: object,
) -> None:
    insp = Inspector(make_app())
    with pytest.raises(ValueError, match=r"1\.\.480 minutes"):
        await insp.metrics.summary(window_minutes=window)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"1\.\.480 minutes"):
        await insp.metrics.job("x", window_minutes=window)  # type: ignore[arg-type]
