"""The Metrics read model's arithmetic, without Redis: the order of the table, the
chart's series, a job's minutes, and how run times and buckets are written."""

from __future__ import annotations

import pytest

from cogworker_async.admin.run_metrics import (
    bucket_labels,
    check_window,
    job_series,
    run_time,
    summarize,
    window_of,
)
from cogworker_async.observe.run_metrics import BUCKETS, JobMinute, Tally, parse


def minute_of_runs(*runs: tuple[str, float, bool]) -> dict[str, JobMinute]:
    """One minute as the reader parses it, from (job, seconds, failed) runs."""
    tally = Tally()
    for name, seconds, failed in runs:
        tally.add(name, ended_at=600.0, seconds=seconds, failed=failed)
    [fields] = tally.take().values()
    return parse(fields)


def test_the_table_puts_most_total_time_first_then_most_runs_then_the_name() -> None:
    first = minute_of_runs(("quick", 0.001, False), ("quick", 0.001, False),
                           ("long", 2.0, False), ("b-tie", 0.5, False))
    second = minute_of_runs(("quick", 0.001, True), ("a-tie", 0.5, False))
    summary = summarize(2, [10, 11], [first, second], top=3)
    assert [row.name for row in summary.jobs] == ["long", "a-tie", "b-tie", "quick"]
    quick = summary.jobs[-1]
    assert (quick.runs, quick.failed, quick.total_ms) == (3, 1, 3)
    assert quick.mean_ms == 1.0
    assert summary.starts_at == 600.0
    # The chart draws the top three, each minute's own counts (zero where it did not run).
    assert [(s.name, s.runs, s.total_ms) for s in summary.top] == [
        ("long", (1, 0), (2000, 0)), ("a-tie", (0, 1), (0, 500)), ("b-tie", (1, 0), (500, 0))]


def test_percentiles_come_from_the_histogram() -> None:
    runs = [("job", 0.003, False)] * 90 + [("job", 0.4, False)] * 10
    [row] = summarize(1, [10], [minute_of_runs(*runs)]).jobs
    assert row.p50_ms is not None
    assert 2 <= row.p50_ms <= 5  # the 2..5 ms bucket
    assert row.p95_ms is not None
    assert 200 <= row.p95_ms <= 500  # the 200..500 ms bucket


def test_a_jobs_minutes_cover_the_window_with_empty_ones_in_between() -> None:
    busy = minute_of_runs(("job", 0.03, False), ("job", 0.03, True), ("other", 9.0, False))
    metrics = job_series("job", 3, [10, 11, 12], [{}, busy, {}])
    assert [m.at for m in metrics.minutes] == [600.0, 660.0, 720.0]
    assert [m.totals.runs for m in metrics.minutes] == [0, 2, 0]
    assert metrics.minutes[1].totals.failed == 1
    assert metrics.minutes[0].totals.mean_ms is None
    assert (metrics.totals.runs, metrics.totals.total_ms) == (2, 60)
    assert sum(metrics.histogram) == 2
    assert len(metrics.histogram) == BUCKETS
    as_json = metrics.as_dict()
    assert as_json["minutes"][1]["runs"] == 2
    assert "name" not in as_json["minutes"][1]


def test_the_window_ends_with_the_minute_now_falls_in() -> None:
    assert window_of(3, now=125.0) == [0, 1, 2]
    assert check_window(480) == 480
    for bad in (0, 481, True, 60.0, "60", None):
        with pytest.raises(ValueError, match=r"1\.\.480 minutes"):
            check_window(bad)


@pytest.mark.parametrize(("ms", "text"), [
    (None, "–"), (0.4, "0.4 ms"), (35.2, "35 ms"), (1200.0, "1.2 s"), (45_000.0, "45 s"),
    (180_000.0, "3 min"), (2000.0, "2 s"), (5_400_000.0, "1.5 h"),
])
def test_run_times_read_in_their_unit(ms: float | None, text: str) -> None:
    assert run_time(ms) == text


def test_every_bucket_has_a_label_the_last_open_ended() -> None:
    labels = bucket_labels()
    assert len(labels) == BUCKETS
    assert labels[0] == "≤ 1 ms"
    assert labels[-1] == "> 30 min"
