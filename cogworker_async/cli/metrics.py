"""``cogworker-async metrics-summary``: the Metrics tab in a terminal — per job class over
the last hour (or ``--window`` minutes, up to 8 hours): runs, failures, total and mean
run time, p50 and p95; or with ``--job NAME`` one class's histogram and minutes.

Read through the same model as the tab (``admin/run_metrics.py``), with the admin
commands' conventions (``cli/common.py``): a table for a person, ``--json`` for a script,
errors at one boundary; exit 2 for a bad window, 3 when Redis is out of reach.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Annotated, Any, Final

import anyio
import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

# The admin CLI imports this module as it loads (to register the command), so its names
# are read when the command runs: annotations are strings, resolved by typer later.
from cogworker_async import logs
from cogworker_async.admin.run_metrics import (
    DEFAULT_WINDOW_MINUTES,
    JobMetrics,
    JobTotals,
    MetricsSummary,
    bucket_labels,
    check_window,
    run_time,
)
from cogworker_async.cli import common
from cogworker_async.errors import CogworkerError, install_extra
from cogworker_async.observe.run_metrics import MAX_WINDOW_MINUTES
from cogworker_async.prometheus import exporter

Window = Annotated[int, typer.Option(
    "--window", metavar="MINUTES",
    help=f"The last MINUTES minutes (1..{MAX_WINDOW_MINUTES}; default: the last hour).")]
JobName = Annotated[str | None, typer.Option(
    "--job", metavar="NAME", help="One job class: its run-time histogram and its minutes.")]

BAR_WIDTH: Final = 30
"""Characters of the longest histogram bar."""
BAR: Final = "█"
MINUTES_PER_HOUR: Final = 60


def register(cli: typer.Typer, load_app: common.LoadApp) -> None:
    cli.command(name="metrics-summary")(_command(load_app))


def _command(load_app: common.LoadApp) -> Any:
    def metrics_summary(
        target: common.Target, window: Window = DEFAULT_WINDOW_MINUTES, job: JobName = None,
        redis_url: common.RedisUrl = None, as_json: common.AsJson = False,
    ) -> None:
        """Runs per job class over the last hour (or --window): runs, failures, total
        and mean run time, p50/p95; --job NAME for one class's histogram and minutes."""
        try:
            check_window(window)  # before Redis is asked anything
        except ValueError as exc:
            common.fail(f"--window: {exc}")
        app = common.open_app(load_app, target, redis_url)
        if job is not None:
            name = job
            found = common.run_in_loop(app, lambda insp: insp.metrics.job(name, window))
            if as_json:
                common.emit_json(found.as_dict())
            else:
                common.show(job_view(found))
            return
        summary = common.run_in_loop(app, lambda insp: insp.metrics.summary(window))
        if as_json:
            common.emit_json(summary.as_dict())
        else:
            common.show(summary_table(summary))

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


# -- metrics: the Prometheus exporter (prometheus/exporter.py) --------------------------


Port = Annotated[int, typer.Option(min=0, max=exporter.MAX_PORT,
                                   help="Port to serve /metrics on (0: any free one).")]
Host = Annotated[str, typer.Option(help="Address to listen on (loopback unless told).")]
LogLevel = Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR.")]
LogFormat = Annotated[str, typer.Option(help="text, or json: one object per line.")]


def register_exporter(cli: typer.Typer, load_app: common.LoadApp) -> None:
    """Add ``metrics`` to ``cli`` (``load_app`` resolves MODULE:ATTRIBUTE)."""
    cli.command(name="metrics")(_metrics_command(load_app))


def _metrics_command(load_app: common.LoadApp) -> Callable[..., None]:
    def metrics(target: common.Target, port: Port, host: Host = exporter.DEFAULT_HOST,
                redis_url: common.RedisUrl = None, log_level: LogLevel = "INFO",
                log_format: LogFormat = "text") -> None:
        """Serve the system-wide Prometheus gauges (queues, sets, processes) until
        SIGTERM/SIGINT: an exporter for those who run no dashboard (the metrics extra)."""
        if (missing := exporter.missing_extra()) is not None:
            common.fail(f"the metrics command needs the metrics extra ({missing}); "
                        f"{install_extra('metrics')}")
        level = logging.getLevelName(log_level.upper())
        if not isinstance(level, int):
            common.fail(f"unknown log level {log_level!r}: use DEBUG, INFO, WARNING or ERROR")
        try:
            logs.configure(level, log_format)
        except ValueError as exc:
            common.fail(str(exc))
        app = common.open_app(load_app, target, redis_url)
        try:
            url = app.redis_url()
            anyio.run(exporter.export, app, url, host, port)
        except CogworkerError as exc:  # a port in use, an unusable URL: usage
            common.fail(str(exc), common.EXIT_USAGE)

    return metrics
