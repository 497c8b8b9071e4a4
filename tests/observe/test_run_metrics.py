"""The run metrics' format and arithmetic (pure): what the Metrics tab and the summary
command show is read off these."""

from __future__ import annotations

import pytest

from cogworker_async.observe import run_metrics
from cogworker_async.observe.run_metrics import BUCKET_BOUNDS_MS, JobMinute, Tally, minute_of, parse


def test_a_run_lands_in_the_bucket_its_time_falls_in() -> None:
    assert run_metrics.bucket_of(0.2) == 0
    assert run_metrics.bucket_of(1) == 0  # bounds are inclusive
    assert run_metrics.bucket_of(1.5) == 1
    assert run_metrics.bucket_of(10_000_000) == len(BUCKET_BOUNDS_MS)  # the open bucket


def test_the_tally_sums_runs_per_minute_and_job_and_empties_when_taken() -> None:
    tally = Tally()
    t = 1_800_000_000.0
    tally.add("send", ended_at=t, seconds=0.004, failed=False)
    tally.add("send", ended_at=t + 1, seconds=0.006, failed=True)
    tally.add("send", ended_at=t + 60, seconds=0.1, failed=False)  # the next minute
    tally.add("a|b", ended_at=t, seconds=2.0, failed=False)  # a name holding the separator
    taken = tally.take()
    assert not tally
    first = parse(taken[minute_of(t)])
    assert first["send"].runs == 2
    assert first["send"].failed == 1
    assert first["send"].ms == 10
    assert sum(first["send"].histogram) == 2
    assert first["a|b"].runs == 1
    assert first["a|b"].ms == 2000
    assert parse(taken[minute_of(t + 60)])["send"].runs == 1


def test_stored_fields_parse_from_bytes_and_foreign_fields_are_skipped() -> None:
    stored = {b"send|runs": b"3", b"send|failed": b"1", b"send|us": b"30000", b"send|h3": b"3",
              b"send|h999": b"5", b"nonsense": b"1", b"send|runs2": b"x"}
    entry = parse(stored)["send"]
    assert (entry.runs, entry.failed, entry.ms) == (3, 1, 30)
    assert entry.histogram[3] == 3
    assert sum(entry.histogram) == 3


def test_percentiles_are_read_off_the_histogram_within_a_bucket() -> None:
    entry = JobMinute()
    for _ in range(90):
        entry.histogram[run_metrics.bucket_of(3)] += 1  # (2, 5] ms
    for _ in range(10):
        entry.histogram[run_metrics.bucket_of(800)] += 1  # (500, 1000] ms
    p50 = entry.percentile(0.5)
    p95 = entry.percentile(0.95)
    assert p50 is not None
    assert 2 <= p50 <= 5
    assert p95 is not None
    assert 500 <= p95 <= 1000
    assert JobMinute().percentile(0.5) is None


def test_sums_over_minutes_add_every_field() -> None:
    a = parse({"x|runs": 1, "x|us": 5000, "x|h2": 1})
    b = parse({"x|runs": 2, "x|failed": 2, "x|us": 7000, "x|h2": 2, "y|runs": 1})
    total = run_metrics.summed([a, b])
    assert (total["x"].runs, total["x"].failed, total["x"].ms) == (3, 2, 12)
    assert total["x"].histogram[2] == 3
    assert total["x"].mean_ms == pytest.approx(4.0)
    assert total["y"].runs == 1
