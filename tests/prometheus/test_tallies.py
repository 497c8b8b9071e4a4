"""The worker's run tallies as a scrape renders them: Prometheus' bucket rules, a bounded
number of series whatever names payloads carry, and scrapes from the server's thread
while runs are counted on another."""

from __future__ import annotations

import threading
import time
from typing import Final

import pytest
from prometheus_client import generate_latest

from cogworker_async.prometheus import process
from cogworker_async.prometheus.process import OTHER, WorkerMetrics
from cogworker_async.settings import Settings
from cogworker_async.worker.observers import Outcome, RunReport, Vitals
from tests.prometheus.scraping import parse, value

IDLE: Final = Vitals(busy=0, concurrency=4, pending=0, loop_lag=0.0)
RUNS: Final = 100_000
"""Runs counted while another thread scrapes."""
NAMES: Final = 50
"""Runs of each job name in turn: new (job, queue) pairs keep coming under the scrapes
for half the runs (until ``MAX_SERIES``)."""


def metrics() -> WorkerMetrics:
    return WorkerMetrics(Settings(metrics_port=0, queues=("default", "mail")), lambda: IDLE)


def report(name: str = "job", *, duration: float = 0.01, wait: float | None = 0.5,
           outcome: Outcome = "succeeded", queue: str = "default") -> RunReport:
    ended = time.time()
    started = ended - duration
    return RunReport(name=name, queue=queue, jid="j", outcome=outcome, duration=duration,
                     ended_at=ended, enqueued_at=None if wait is None else started - wait,
                     started_at=started)


def test_a_run_on_a_bucket_bound_is_in_that_bucket_and_count_is_every_run() -> None:
    m = metrics()
    m.finished(report(duration=0.005))  # exactly the first bound: le="0.005"
    m.finished(report(duration=5000.0))  # past every bound: +Inf only
    m.finished(report(wait=None))  # no enqueue time: its wait is not observed
    samples = parse(generate_latest(m.registry).decode())
    assert value(samples, "cogworker_job_duration_seconds_bucket", le="0.005") == 1
    assert value(samples, "cogworker_job_duration_seconds_bucket", le="3600.0") == 2
    assert value(samples, "cogworker_job_duration_seconds_bucket", le="+Inf") == 3
    assert value(samples, "cogworker_job_duration_seconds_count") == 3
    sum_ = value(samples, "cogworker_job_duration_seconds_sum")
    assert sum_ == pytest.approx(0.005 + 5000.0 + 0.01)
    assert value(samples, "cogworker_job_wait_seconds_count") == 2
    assert value(samples, "cogworker_job_wait_seconds_sum") == pytest.approx(1.0)
    # Served queues show their recoveries from 0; the gauges come from the vitals.
    assert value(samples, "cogworker_jobs_recovered_total", queue="mail") == 0
    assert value(samples, "cogworker_concurrency") == 4


def test_names_past_the_bound_are_counted_as_other(monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(process, "MAX_SERIES", 3)
    m = metrics()
    for n in range(10):  # ever new names, as a producer of unknown jobs could send
        m.finished(report(f"unknown-{n}", outcome="dead"))
    samples = parse(generate_latest(m.registry).decode())
    jobs = {s.labels["job"] for s in samples if s.name == "cogworker_jobs_total"}
    assert jobs == {"unknown-0", "unknown-1", "unknown-2", OTHER}
    assert value(samples, "cogworker_jobs_total", job=OTHER, outcome="dead") == 7
    assert len(m.tallies) == 4
    assert len([r for r in caplog.records if OTHER in r.getMessage()]) == 1


def test_scrapes_in_another_thread_see_consistent_growing_counts() -> None:
    """Runs of ever new (job, queue) pairs counted while a thread scrapes: no scrape
    fails (the tallies grow under it), each histogram's count is its +Inf bucket, no
    counter ever goes down, and the last scrape has every run."""
    m = metrics()
    done = threading.Event()
    failures: list[BaseException] = []
    seen: list[float] = []

    def scrape() -> None:
        # The registry's families as the exposition reads them (no text: it would be
        # slower than the runs it watches).
        samples = [s for family in m.registry.collect() for s in family.samples]
        runs = sum(s.value for s in samples if s.name == "cogworker_jobs_total")
        counts = sum(s.value for s in samples if s.name == "cogworker_job_duration_seconds_count")
        infs = sum(s.value for s in samples if s.name == "cogworker_job_duration_seconds_bucket"
                   and s.labels["le"] == "+Inf")
        assert counts == infs
        assert not seen or runs >= seen[-1]
        seen.append(runs)

    def scrape_all_the_time() -> None:
        try:
            while not done.is_set():
                scrape()
        except BaseException as exc:
            failures.append(exc)

    scraper = threading.Thread(target=scrape_all_the_time)
    scraper.start()
    try:
        for n in range(RUNS):
            m.finished(report(f"job-{n // NAMES}", queue=("default", "mail")[n % 2]))
    finally:
        done.set()
        scraper.join()
    assert failures == []
    assert len(seen) >= 2  # scrapes ran while runs were counted
    scrape()
    assert seen[-1] == RUNS


def test_registered_names_keep_their_series_past_a_flood_of_invented_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "MAX_SERIES", 3)
    m = WorkerMetrics(Settings(metrics_port=0), lambda: IDLE, registered=["send", "bill"])
    for n in range(10):  # the cap is spent by names from payloads first...
        m.finished(report(f"invented-{n}", outcome="dead"))
    m.finished(report("send"))  # ...and the app's own jobs still get theirs
    m.finished(report("bill", queue="mail"))
    samples = parse(generate_latest(m.registry).decode())
    jobs = {s.labels["job"] for s in samples if s.name == "cogworker_jobs_total"}
    assert jobs == {"invented-0", "invented-1", "invented-2", OTHER, "send", "bill"}
    assert value(samples, "cogworker_jobs_total", job="send", outcome="succeeded") == 1
    assert value(samples, "cogworker_jobs_total", job=OTHER, outcome="dead") == 7
