"""Rendering for the admin CLI: what ``Inspector`` read, as rich tables for a person.

Pure functions from the read model's values to renderables (no I/O, no Redis), so that
what a command shows is decided apart from how it was read. Times are relative ("3s
ago", "in 2m") against the ``now`` passed in; the JSON output keeps epoch seconds.
Every table that lists entries shows their token: it is what the actions take.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cogworker_async.admin.limits import capacity_text
from cogworker_async.admin.records import (
    DayTotals,
    JobRecord,
    Page,
    PeriodicInfo,
    ProcessInfo,
    QueueInfo,
)
from cogworker_async.admin.serving import UNSERVED_HINT
from cogworker_async.jobs import priority
from cogworker_async.redis.limits import LimiterUsage

ARGS_SHOWN: Final = 60
"""Characters of a job's arguments (or error) a table row shows; ``--json`` has them all."""
MINUTE: Final = 60.0
HOUR: Final = 3600.0
DAY: Final = 86_400.0
MIB: Final = 1024 * 1024
NONE: Final = "-"
NOT_AVAILABLE: Final = "n/a"
"""What Redis would not tell (INFO or CONFIG refused to this user)."""


# -- values -----------------------------------------------------------------------------


def duration(seconds: float) -> str:
    """``42s``, ``3m``, ``5h``, ``2d``: the one unit that matters at a glance."""
    seconds = abs(seconds)
    if seconds < 10:
        return f"{seconds:.1f}s" if seconds % 1 else f"{seconds:.0f}s"
    for unit, size in (("d", DAY), ("h", HOUR), ("m", MINUTE)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit}"
    return f"{seconds:.0f}s"


def relative(at: float | None, now: float) -> str:
    """``3s ago`` for the past, ``in 2m`` for the future, ``-`` for never."""
    if at is None:
        return NONE
    delta = now - at
    return f"{duration(delta)} ago" if delta >= 0 else f"in {duration(delta)}"


def cut(text: str, limit: int = ARGS_SHOWN) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_of(record: JobRecord) -> str:
    if record.error_class is None:
        return NONE
    return cut(f"{record.error_class}: {record.error_message or ''}".rstrip(": "))


def megabytes(size: int | None) -> str:
    return NONE if size is None else f"{size / MIB:.1f} MiB"


def _token_column(table: Table) -> None:
    # Never cut or wrapped: a token is copied whole into ``--retry``/``--delete``.
    table.add_column("token", no_wrap=True, overflow="fold", style="dim")


# -- stats and queues -------------------------------------------------------------------


def stats(summary: dict[str, Any], server: dict[str, Any],
          history: Sequence[DayTotals] = ()) -> RenderableType:
    totals = Table(show_header=False, box=None, pad_edge=False)
    totals.add_column(style="bold")
    totals.add_column(justify="right")
    for label, key in (("processed", "processed"), ("failed", "failed"),
                       ("enqueued", "enqueued"),
                       ("waiting for parents", "waiting_for_parents"),
                       ("scheduled", "scheduled"),
                       ("retries", "retries"), ("dead", "dead"),
                       ("live processes", "processes"), ("busy", "busy"),
                       ("awaiting recovery", "awaiting_recovery")):
        totals.add_row(label, str(summary[key]))
    totals.add_row("dead limits", f"{summary['dead_max_jobs']:,} jobs, "
                                  f"{duration(summary['dead_max_age'])} each")
    totals.add_row("redis", redis_line(server))
    totals.add_row("maxmemory-policy", summary["maxmemory_policy"] or NOT_AVAILABLE)
    queues = [QueueInfo(q["name"], q["size"], q["latency"], q.get("paused_since"),
                        q.get("waiting_for_parents", 0),
                        {int(p): n for p, n in q.get("by_priority", {}).items()},
                        q.get("by_group", {}), unserved=q.get("unserved", False))
              for q in summary["queues"]]
    parts: list[RenderableType] = [totals, Text(""), queue_table(queues)]
    if summary["eviction_warning"]:
        parts.insert(0, Text(f"warning: {summary['eviction_warning']}", style="bold red"))
    if history:
        parts += [Text(""), history_table(history)]
    return Group(*parts)


def redis_line(server: dict[str, Any]) -> str:
    """``redis 7.2.4, 1.2M used``; ``n/a`` where Redis refuses INFO (every field None). On
    a cluster the figures are one node's, and the line says so."""
    if server["version"] is None:
        return NOT_AVAILABLE
    line = f"{server['server']} {server['version']}, {server['used_memory_human']} used"
    nodes = server.get("cluster_nodes")
    return f"{line} (one node of a cluster of {nodes} primaries)" if nodes else line


def history_table(history: Sequence[DayTotals]) -> RenderableType:
    table = Table(title="per day (UTC)", title_justify="left")
    table.add_column("day")
    table.add_column("processed", justify="right")
    table.add_column("failed", justify="right")
    for day in history:
        table.add_row(day.day, f"{day.processed:,}", f"{day.failed:,}")
    return table


def queue_table(queues: Sequence[QueueInfo]) -> RenderableType:
    if not queues:
        return Text("no queues hold jobs")
    table = Table(title="queues", title_justify="left")
    table.add_column("queue")
    table.add_column("size", justify="right")
    table.add_column("latency", justify="right")
    table.add_column("state")
    # Apart from size: these are not on the queue's list until their parents succeeded.
    # Last, so that a column a script reads keeps its place.
    table.add_column("waiting for parents", justify="right")
    table.add_column("by priority")
    table.add_column("groups", justify="right")  # fair groups with jobs waiting
    for info in queues:
        table.add_row(info.name, str(info.size), duration(info.latency),
                      info.state, str(info.waiting_for_parents),
                      priority.describe(info.by_priority), groups_waiting(info))
    if any(info.state == "unserved" for info in queues):
        table.caption = f"unserved: {UNSERVED_HINT}"
        table.caption_justify = "left"
    return table


def groups_waiting(info: QueueInfo) -> str:
    """How many fair groups have jobs waiting on the queue; "" for none (most queues)."""
    return f"{len(info.by_group):,}" if info.by_group else ""


def queue_page(name: str, page: Page[JobRecord]) -> RenderableType:
    table = Table(title=f"queue {name}: {_page_line(page)}", title_justify="left")
    table.add_column("#", justify="right")
    _token_column(table)
    _job_columns(table)
    for record in page.items:
        table.add_row(str(record.position), record.token, record.name,
                      record.display_args(ARGS_SHOWN))
    return table if page.items else Text(f"queue {name}: {_page_line(page)}, nothing here")


def _job_columns(table: Table) -> None:
    # No jid column: the token is what an action takes, and --json has the jid. Minimum
    # widths, so that a narrow terminal (or a pipe: 80 columns) still shows what the job is.
    table.add_column("class", min_width=10, overflow="fold")
    table.add_column("args", min_width=12, overflow="fold")


def _page_line(page: Page[Any]) -> str:
    return f"page {page.number} of {page.pages} ({page.total} in all)"


# -- scheduled, retries, dead -----------------------------------------------------------

WHEN_HEADER: Final = {"scheduled": "due", "retries": "next try", "dead": "died"}


def set_table(which: str, records: Sequence[JobRecord], title: str,
              now: float) -> RenderableType:
    if not records:
        return Text(f"{title}, nothing here")
    table = Table(title=title, title_justify="left")
    table.add_column(WHEN_HEADER.get(which, "when"), no_wrap=True)
    _token_column(table)
    _job_columns(table)
    failed = which != "scheduled"
    if failed:
        table.add_column("error", min_width=16, overflow="fold")
    for record in records:
        row = [relative(record.score, now), record.token, record.name,
               record.display_args(ARGS_SHOWN)]
        table.add_row(*row, *([error_of(record)] if failed else []))
    return table


def set_title(which: str, page: Page[JobRecord]) -> str:
    return f"{which}: {_page_line(page)}"


# -- processes and periodic -------------------------------------------------------------


def _state(process: ProcessInfo) -> Text:
    if process.alive:
        return Text("alive", style="green")
    if process.awaiting_recovery:
        return Text("AWAITING RECOVERY", style="bold red")
    return Text("stopped", style="dim")


def processes(found: Sequence[ProcessInfo], recoveries: Sequence[dict[str, Any]],
              burials: Sequence[JobRecord], now: float) -> RenderableType:
    parts: list[RenderableType] = [_process_table(found, now)]
    running = [(p, job) for p in found for job in p.running]
    if running:
        table = Table(title="running", title_justify="left")
        for header in ("identity", "jid", "class", "queue", "for"):
            table.add_column(header, no_wrap=header in ("identity", "jid"))
        for process, job in running:
            table.add_row(process.identity, job.jid, job.name, job.queue or NONE,
                          duration(job.runtime) if job.runtime is not None else NONE)
        parts.append(table)
    if recoveries:
        parts.append(_recoveries_table(recoveries, now))
    if burials:
        parts.append(set_table("dead", burials, "buried as ProcessDied (recent)", now))
    return Group(*parts)


def _process_table(found: Sequence[ProcessInfo], now: float) -> RenderableType:
    if not found:
        return Text("no worker processes")
    table = Table(title="processes", title_justify="left")
    for header in ("identity", "state", "host", "pid", "started", "beat", "lag", "busy",
                   "rss", "queues"):
        table.add_column(header, no_wrap=header == "identity")
    for p in found:
        table.add_row(
            p.identity, _state(p),
            (p.hostname or NONE) + (f" (supervisor {p.supervisor})" if p.supervisor else ""),
            str(p.pid or NONE),
            relative(p.started_at, now),
            f"{duration(p.beat_age)} ago" if p.beat_age is not None else NONE,
            f"{p.lag_ms:.0f}ms" if p.lag_ms is not None else NONE,
            f"{p.busy}/{p.concurrency if p.concurrency is not None else '?'}",
            megabytes(p.rss_bytes), ", ".join(p.queues) or NONE)
    return table


def _recoveries_table(events: Sequence[dict[str, Any]], now: float) -> RenderableType:
    table = Table(title="recent recoveries", title_justify="left")
    for header in ("when", "dead process", "requeued", "parked", "cancelled", "by"):
        table.add_column(header)
    for event in events:
        at = event.get("at")
        table.add_row(relative(at if isinstance(at, int | float) else None, now),
                      str(event.get("identity", "?")), str(event.get("requeued", 0)),
                      str(event.get("parked", 0)), str(event.get("cancelled", 0)),
                      str(event.get("by", "?")))
    return table


def periodic(found: Sequence[PeriodicInfo], now: float) -> RenderableType:
    if not found:
        return Text("no periodic jobs registered")
    table = Table(title="periodic jobs", title_justify="left")
    for header in ("name", "schedule", "tz", "queue", "next run", "last run", "running"):
        table.add_column(header)
    for info in found:
        table.add_row(info.name, info.schedule, info.tz, info.queue,
                      relative(info.next_run, now), relative(info.last_run, now),
                      "yes" if info.running else "no")
    return table


def limits(found: Sequence[LimiterUsage]) -> RenderableType:
    if not found:
        return Text("no limiters registered (a worker registers its App's at start)")
    table = Table(title="limiters", title_justify="left")
    for header in ("name", "kind", "allows", "in use", "refused (1-2 min)"):
        table.add_column(header, justify="right" if header.startswith(("in", "ref")) else
                         "left")
    for usage in found:
        table.add_row(usage.name, usage.kind, capacity_text(usage),
                      f"{usage.in_use:,} / {usage.capacity:,}", f"{usage.over_recent:,}")
    return table
