"""``cogworker-async metrics-summary`` against runs a real worker recorded: the JSON a
script reads, the table a person reads, one job class's minutes, and a refused window."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from cogworker_async.admin import Inspector
from tests.cli import adminapp
from tests.cli.conftest import in_loop, invoke, invoke_json, work_until


def recorded(**runs: int) -> Callable[[Inspector], Awaitable[bool]]:
    """A ``work_until`` condition: the run metrics hold exactly these runs per job."""

    async def reached(insp: Inspector) -> bool:
        summary = await insp.metrics.summary()
        return {row.name: row.runs for row in summary.jobs} == runs

    return reached


def run_some(jobs: adminapp.Jobs) -> None:
    """3 ``ok`` runs and 2 ``doomed`` (failed, to dead), recorded."""

    async def enqueue() -> None:
        for n in range(3):
            await jobs.ok.enqueue(f"ok{n}")
        for n in range(2):
            await jobs.doomed.enqueue(f"d{n}")

    in_loop(jobs, enqueue)
    work_until(jobs, recorded(ok=3, doomed=2))


def test_the_json_summary_has_each_job_class(jobs: adminapp.Jobs) -> None:
    run_some(jobs)
    summary = invoke_json("metrics-summary")
    assert summary["window_minutes"] == 60
    assert len(summary["minutes"]) == 60
    rows = {row["name"]: row for row in summary["jobs"]}
    assert {name: (row["runs"], row["failed"]) for name, row in rows.items()} == {
        "ok": (3, 0), "doomed": (2, 2)}
    for row in rows.values():
        assert row["total_ms"] >= 0
        assert row["p50_ms"] is not None
        assert row["p95_ms"] >= row["p50_ms"]
    totals = [row["total_ms"] for row in summary["jobs"]]
    assert totals == sorted(totals, reverse=True)
    assert invoke_json("metrics-summary", "--window", "480")["window_minutes"] == 480


def test_the_table_and_one_job_class(jobs: adminapp.Jobs) -> None:
    run_some(jobs)
    result = invoke("metrics-summary", "--window", "120")
    assert result.exit_code == 0, result.output
    assert "runs per job class, the last 2 h" in result.stdout
    doomed = next(line for line in result.stdout.splitlines() if "doomed" in line)
    assert [cell.strip() for cell in doomed.split("│")[1:4]] == ["doomed", "2", "2"]

    one = invoke_json("metrics-summary", "--job", "doomed")
    assert one["name"] == "doomed"
    assert (one["totals"]["runs"], one["totals"]["failed"]) == (2, 2)
    assert sum(one["histogram"]) == 2
    assert len(one["histogram"]) == len(one["bucket_bounds_ms"]) + 1
    assert sum(minute["runs"] for minute in one["minutes"]) == 2

    text = invoke("metrics-summary", "--job", "doomed")
    assert text.exit_code == 0, text.output
    assert "doomed: the last 1 h" in text.stdout
    assert "█" in text.stdout  # the histogram's bar
    assert "minutes with runs" in text.stdout


def test_no_runs_and_a_bad_window(jobs: adminapp.Jobs) -> None:
    empty = invoke("metrics-summary")
    assert empty.exit_code == 0, empty.output
    assert "no runs in the last 1 h" in empty.stdout
    assert invoke_json("metrics-summary")["jobs"] == []
    never = invoke("metrics-summary", "--job", "ok")
    assert "ok: no runs in the last 1 h" in never.stdout
    for window in ("0", "481"):
        refused = invoke("metrics-summary", "--window", window)
        assert refused.exit_code == 2
        assert "error: --window: the metrics window is 1..480 minutes" in refused.stderr
        assert "Traceback" not in refused.output
