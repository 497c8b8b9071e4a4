"""``cogworker-async job app:jobs JID``: what became of one job, by its jid — its state,
queue, attempt, times, progress, result or error, and the process running it (a job
waiting for its parents: each parent, pending or ended, and its on_parent_failure); with
``--cancel``, cancel it first and say what that did.

Read through the dashboard's model (``Inspector.jobs``, ``admin/job_status.py``), with
the admin commands' conventions (``cli/common.py``): a table for a person, ``--json``
(``JobStatus.as_dict()``, plus ``"cancel"``, and ``"waiting_for"`` for a waiting job:
``WaitingFor.as_dict()``) for a script, errors at one boundary.
Exit codes: 0 the job is known; 4 (``EXIT_UNKNOWN``) no record of it (never enqueued,
or its record expired); 2 not a jid; 3 Redis out of reach.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Final

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cogworker_async.admin.api import Inspector
from cogworker_async.admin.waiting import WaitingFor

# The admin CLI imports this module as it loads (to register the command), so its names
# are read when the command runs: annotations are strings, resolved by typer later.
from cogworker_async.cli import common, tables
from cogworker_async.jobs.status import CancelOutcome, JobStatus

EXIT_UNKNOWN: Final = 4
"""No record of the jid: apart from 1 (an entry gone), 2 (usage) and 3 (Redis), so a
script can tell "no such job" from "could not ask"."""
BAR_WIDTH: Final = 30
"""Characters of the progress bar."""
SAID: Final = {
    "cancelled": "cancelled: the job will not run",
    "stopping": "stopping: its process was asked to stop it (an async job stops within "
                "about a second; a plain function sees current_job().cancel_requested)",
    "finished": "nothing done: the job had already finished",
    "unknown": "nothing done: no job with this jid is known",
}
"""What ``--cancel`` did (``status.CancelOutcome``), for a person."""

Jid = Annotated[str, typer.Argument(help="The job's jid (what enqueue returned).")]
Cancel = Annotated[bool, typer.Option("--cancel", help="Cancel the job first.")]


def register(cli: typer.Typer, load_app: common.LoadApp) -> None:
    cli.command(name="job")(_command(load_app))


def _command(load_app: common.LoadApp) -> Any:
    def job(target: common.Target, jid: Jid, cancel: Cancel = False,
            redis_url: common.RedisUrl = None, as_json: common.AsJson = False) -> None:
        """What became of one job, by its jid: state, queue, attempt, times, progress,
        result or error, the process running it. --cancel cancels it first."""
        app = common.open_app(load_app, target, redis_url)
        outcome, found, waiting = common.run_in_loop(
            app, lambda insp: _look(insp, jid, cancel=cancel))
        if as_json:
            common.emit_json({**found.as_dict(),
                              **({"cancel": outcome} if outcome is not None else {}),
                              **({"waiting_for": waiting.as_dict()} if waiting else {})})
        else:
            if outcome is not None:
                typer.echo(SAID[outcome])
            common.show(status_view(found, time.time(), waiting))
        if found.state == "unknown" or outcome == "unknown":
            raise typer.Exit(EXIT_UNKNOWN)

    return job


async def _look(insp: Inspector, jid: str, *, cancel: bool
                ) -> tuple[CancelOutcome | None, JobStatus, WaitingFor | None]:
    """Cancel if asked, then read the record (as the cancel left it), and what a
    waiting job waits for."""
    outcome = await insp.jobs.cancel(jid) if cancel else None
    found = await insp.jobs.status(jid)
    return outcome, found, await insp.jobs.waiting_for(found)


# -- rendering (pure) --------------------------------------------------------------------


def progress_bar(fraction: float) -> str:
    """``[█████░░░░░] 42%``: floored, so 0.999 is never shown as done."""
    fraction = max(0.0, min(1.0, fraction))
    filled = int(fraction * BAR_WIDTH)
    return f"[{'█' * filled}{'░' * (BAR_WIDTH - filled)}] {int(fraction * 100)}%"


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2,
                                                          ensure_ascii=False, default=repr)


def _times(found: JobStatus, now: float) -> list[tuple[str, str]]:
    rows = [("enqueued", tables.relative(found.enqueued_at, now))]
    if found.started_at is not None:
        rows.append(("started", tables.relative(found.started_at, now)))
    if found.finished_at is not None:
        rows.append(("finished", tables.relative(found.finished_at, now)))
        if found.started_at is not None and found.finished_at >= found.started_at:
            rows.append(("ran for", tables.duration(found.finished_at - found.started_at)))
    elif found.started_at is not None and found.state == "running":
        rows.append(("running for", tables.duration(now - found.started_at)))
    return rows


def _parents(waiting: WaitingFor) -> list[tuple[str, str]]:
    """A waiting job's rows: its parents (one a line, ``queue/jid``: a jid to copy),
    whose result it takes, what it does should one fail."""
    lines = [f"{p.queue}/{p.jid} ({'pending' if p.pending else 'ended'})"
             for p in waiting.parents]
    rows = [(f"waits for ({waiting.pending} of {len(waiting.parents)} not ended)",
             "\n".join(lines) or tables.NONE)]
    taken = waiting.takes_result_of
    if taken is not None:
        rows.append(("takes the result of", f"{taken.queue}/{taken.jid}"))
    rows.append(("if a parent fails", waiting.policy_text))
    return rows


def status_view(found: JobStatus, now: float,
                waiting: WaitingFor | None = None) -> RenderableType:
    """The status as a two-column table (a line for an unknown jid); ``waiting``: what
    a waiting job waits for."""
    if found.state == "unknown":
        return Text(f"job {found.jid}: unknown (no status record: never enqueued here, "
                    "or it ended longer ago than its record is kept)")
    # The jid on a line of its own, not as the title: a title wraps at the table's
    # width, and a narrow table would fold the jid a person copies.
    table = Table(show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    state = found.state + (" (cancel requested)" if found.cancel_requested
                           and not found.finished else "")
    rows = [("state", state), ("job", found.name or tables.NONE),
            ("queue", found.queue or tables.NONE),
            ("attempt", str(found.attempt) if found.attempt else tables.NONE),
            *_times(found, now)]
    if found.process:
        rows.append(("process" if found.state == "running" else "last run by", found.process))
    if waiting is not None:
        rows += _parents(waiting)
    elif found.state == "waiting":  # released or ended between the two reads
        rows.append(("waits for", "its parents could not be read: it was released or "
                                  "ended since its record was read"))
    if found.progress is not None:
        rows.append(("progress", progress_bar(found.progress)))
    if found.info is not None:
        rows.append(("info", _json_text(found.info)))
    if found.has_result:
        # Always as JSON: a result "null" (a string) must not read as None.
        rows.append(("result", json.dumps(found.result, indent=2, ensure_ascii=False,
                                          default=repr)))
    if found.error:
        rows.append(("error" if found.state == "dead" else "last error", found.error))
    for field, value in rows:
        table.add_row(field, value)
    return Group(Text(f"job {found.jid}"), table)
