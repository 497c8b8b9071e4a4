"""``cogworker-async batch app:jobs BID``: what a batch has come to — its state, its
members' counts, its children and the callbacks due or enqueued; with ``--cancel``,
cancel every member not ended first (child batches included).

The admin commands' conventions (``cli/common.py``): a table for a person, ``--json``
(``BatchStatus`` as a dict, plus ``"cancelled"``) for a script. Exit codes: 0 the batch
is known; 4 no such batch (or it ended longer ago than it is kept); 1 its keys are
damaged (not what the batch scripts write: one line says how); 2 not a bid; 3 Redis out
of reach.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Annotated, Any, Final

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cogworker_async.admin.api import Inspector
from cogworker_async.cli import common, tables
from cogworker_async.workflows.batch import BatchStatus

EXIT_UNKNOWN: Final = 4
EXIT_DAMAGED: Final = 1

Bid = Annotated[str, typer.Argument(help="The batch's id (batch.bid).")]
Cancel = Annotated[bool, typer.Option("--cancel", help="Cancel its members first.")]


def register(cli: typer.Typer, load_app: common.LoadApp) -> None:
    cli.command(name="batch")(_command(load_app))


def _command(load_app: common.LoadApp) -> Any:
    def batch(target: common.Target, bid: Bid, cancel: Cancel = False,
              redis_url: common.RedisUrl = None, as_json: common.AsJson = False) -> None:
        """What became of a batch, by its bid: state, members by how they ended, child
        batches, callbacks. --cancel cancels its members not ended first."""
        app = common.open_app(load_app, target, redis_url)
        cancelled, found = common.run_in_loop(app, lambda insp: _look(insp, bid, cancel))
        if as_json:
            common.emit_json({**dataclasses.asdict(found),
                              **({"cancelled": cancelled} if cancel else {})})
        else:
            if cancel:
                typer.echo(f"cancelled {cancelled} member(s)")
            common.show(status_view(found, time.time()))
        if found.state == "unknown":
            raise typer.Exit(EXIT_UNKNOWN)
        if found.state == "damaged":
            raise typer.Exit(EXIT_DAMAGED)

    return batch


async def _look(insp: Inspector, bid: str, cancel: bool) -> tuple[int, BatchStatus]:
    app = insp.app
    cancelled = await app.cancel_batch(bid) if cancel else 0
    return cancelled, await app.batch_status(bid)


def status_view(found: BatchStatus, now: float) -> RenderableType:
    """The status as a two-column table (a line for an unknown bid). Pure."""
    if found.state == "unknown":
        return Text(f"batch {found.bid}: unknown (never opened here, or it ended longer "
                    "ago than it is kept)")
    if found.state == "damaged":
        return Text(f"batch {found.bid}: damaged: {found.problem}")
    table = Table(show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    rows = [("state", found.state), ("description", found.description or tables.NONE),
            ("members", f"{found.total}: {found.pending} pending, {found.succeeded} "
                        f"succeeded, {found.dead} dead, {found.cancelled} cancelled"),
            ("opened", tables.relative(found.created_at, now))]
    if found.finished_at is not None:
        rows.append(("ended", tables.relative(found.finished_at, now)))
    if found.parent:
        rows.append(("parent", found.parent))
    if found.children:
        rows.append(("children", ", ".join(found.children)))
    for kind, jid in found.callbacks.items():
        rows.append((f"on_{kind}", jid))
    for field, value in rows:
        table.add_row(field, value)
    return Group(Text(f"batch {found.bid}"), table)
