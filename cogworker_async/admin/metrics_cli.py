"""``cogworker-async metrics-summary``: the Metrics tab in a terminal — per job class over
the last hour (or ``--window`` minutes, up to 8 hours): runs, failures, total and mean
run time, p50 and p95; or with ``--job NAME`` one class's histogram and minutes.

Read through the same model as the tab (``admin/run_metrics.py``), with the admin
commands' conventions (``admin/cli.py``): a table for a person, ``--json`` for a script,
errors at one boundary; exit 2 for a bad window, 3 when Redis is out of reach.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Final

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

# The admin CLI imports this module as it loads (to register the command), so its names
# are read when the command runs: annotations are strings, resolved by typer later.
from cogworker_async.admin import cli as admin_cli
from cogworker_async.admin.run_metrics import (
    DEFAULT_WINDOW_MINUTES,
    JobMetrics,
    JobTotals,
    MetricsSummary,
    bucket_labels,
    check_window,
    run_time,
)
from cogworker_async.run_metrics import MAX_WINDOW_MINUTES

Window = Annotated[int, typer.Option(
    "--window", metavar="MINUTES",
    help=f"The last MINUTES minutes (1..{MAX_WINDOW_MINUTES}; default: the last hour).")]
JobName = Annotated[str | None, typer.Option(
    "--job", metavar="NAME", help="One job class: its run-time histogram and its minutes.")]

BAR_WIDTH: Final = 30
"""Characters of the longest histogram bar."""
BAR: Final = "█"
MINUTES_PER_HOUR: Final = 60


def register(cli: typer.Typer, load_app: admin_cli.LoadApp) -> None:
    cli.command(name="metrics-summary")(_command(load_app))


def _command(load_app: admin_cli.LoadApp) -> Any:
    def metrics_summary(
        target: admin_cli.Target, window: Window = DEFAULT_WINDOW_MINUTES, job: JobName = None,
        redis_url: admin_cli.RedisUrl = None, as_json: admin_cli.AsJson = False,
    ) -> None:
        """Runs per job class over the last hour (or --window): runs, failures, total
        and mean run time, p50/p95; --job NAME for one class's histogram and minutes."""
        try:
            check_window(window)  # before Redis is asked anything
        except ValueError as exc:
            admin_cli.fail(f"--window: {exc}")
        app = admin_cli.open_app(load_app, target, redis_url)
        if job is not None:
            name = job
            found = admin_cli._run(app, lambda insp: insp.metrics.job(name, window))
            if as_json:
                admin_cli.emit_json(found.as_dict())
            else:
                admin_cli.show(job_view(found))
            return
        summary = admin_cli._run(app, lambda insp: insp.metrics.summary(window))
        if as_json:
            admin_cli.emit_json(summary.as_dict())
        else:
            admin_cli.show(summary_table(summary))

    return metrics_summary


# -- rendering (pure) --------------------------------------------------------------------


def window_text(minutes: int) -> str:
    hours, rest = divmod(minutes, MINUTES_PER_HOUR)
    return f"{hours} h" if not rest else f"{minutes} min"


def clock(at: float) -> str:
    """``14:05 UTC``: a minute of today's window."""
    return time.strftime("%H:%M UTC", time.gmtime(at))


def summary_table(summary: MetricsSummary) -> RenderableType:
    """Each job class that ran, most total run time first."""
    since = f"the last {window_text(summary.window_minutes)} (since {clock(summary.starts_at)})"
    if not summary.jobs:
        return Text(f"no runs in {since}")
    table = Table(title=f"runs per job class, {since}", title_justify="left")
    table.add_column("job", overflow="fold")
    for column in ("runs", "failed", "total", "mean", "p50", "p95"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in summary.jobs:
        table.add_row(row.name, *_figures(row))
    return table


def _figures(row: JobTotals) -> tuple[str, ...]:
    return (f"{row.runs:,}", f"{row.failed:,}", run_time(row.total_ms), run_time(row.mean_ms),
            run_time(row.p50_ms), run_time(row.p95_ms))


def job_view(found: JobMetrics) -> RenderableType:
    """One class: its totals, the window's histogram as bars, and its minutes."""
    since = f"the last {window_text(found.window_minutes)} (since {clock(found.starts_at)})"
    if not found.totals.runs:
        return Text(f"{found.name}: no runs in {since}")
    head = Text(f"{found.name}: {since}\n" + "  ".join(
        f"{label} {value}" for label, value in zip(
            ("runs", "failed", "total", "mean", "p50", "p95"), _figures(found.totals),
            strict=True)))
    return Group(head, Text(""), histogram_table(found.histogram), Text(""),
                 minutes_table(found))


def histogram_table(histogram: tuple[int, ...]) -> RenderableType:
    """The used run-time buckets, fastest first, each with a bar to scale."""
    used = [index for index, count in enumerate(histogram) if count]
    peak = max(histogram)
    labels = bucket_labels()
    table = Table(title="run time", title_justify="left", box=None, pad_edge=False)
    table.add_column("bucket", justify="right", no_wrap=True)
    table.add_column("runs", justify="right")
    table.add_column("")
    for index in range(used[0], used[-1] + 1):
        count = histogram[index]
        bar = BAR * max(1, round(count / peak * BAR_WIDTH)) if count else ""
        table.add_row(labels[index], f"{count:,}", bar)
    return table


def minutes_table(found: JobMetrics) -> RenderableType:
    table = Table(title="minutes with runs", title_justify="left")
    table.add_column("minute", no_wrap=True)
    for column in ("runs", "failed", "total", "mean", "p50", "p95"):
        table.add_column(column, justify="right", no_wrap=True)
    for minute in found.minutes:
        if minute.totals.runs:
            table.add_row(clock(minute.at), *_figures(minute.totals))
    return table
