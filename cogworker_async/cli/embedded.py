"""``cogworker-async embedded start|status|stop``: the folder's embedded server by hand.

Any process of the folder starts the server when it needs one, and the server outlives
it (``embedded.py``); these commands are for a person: ``status`` says whether one runs
and what it holds, ``stop`` ends it (its data stays in the data dir for the next start),
``start`` starts it ahead of time and prints its URL. ``status --all`` lists every
server this user started, in any folder (from the per-user registry, each entry proven
against the server first: ``redis/embedded_fleet.py``), ``stop --all`` stops them.

The data dir is ``--data-dir``, else an App's own ``data_dir`` when one is named
(``cogworker-async embedded status app:jobs``), else ``$COGWORKER_DATA_DIR``, else
``./.cogworker``. Exit codes: 0 done (``status``: running), 1 (``stop --all``) one would
not stop, 2 usage, 3 (``status``) no server running, as ``systemctl status`` says 3 for
a unit that is not active.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich.table import Table

from cogworker_async.cli import common
from cogworker_async.cli.tables import NONE, duration, megabytes
from cogworker_async.redis import embedded_fleet, embedded_registry
from cogworker_async.redis.embedded import SOCKET_NAME, EmbeddedServer, ServerStatus
from cogworker_async.redis.embedded_fleet import FleetServer

EXIT_NOT_RUNNING: Final = 3
EXIT_NOT_STOPPED: Final = 1

App = Annotated[str | None, typer.Argument(
    help="MODULE:ATTRIBUTE of an App whose data_dir to use (optional).",
    show_default=False)]
DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", help="The data dir (default: $COGWORKER_DATA_DIR, else ./.cogworker).",
    show_default=False)]
Every = Annotated[bool, typer.Option(
    "--all", help="Every embedded server you started, in any folder (not with an App or "
    "--data-dir).")]
AsJson = Annotated[bool, typer.Option("--json", help="With --all: a JSON list.")]


def register(cli: typer.Typer, load_app: common.LoadApp) -> None:
    group = typer.Typer(name="embedded", no_args_is_help=True,
                        help="The folder's embedded server: start, status, stop "
                        "(status --all, stop --all: every one you started).")
    group.command(name="start")(_start(load_app))
    group.command(name="status")(_status(load_app))
    group.command(name="stop")(_stop(load_app))
    cli.add_typer(group)


def _no_folder_with_all(target: str | None, data_dir: Path | None) -> None:
    if target is not None or data_dir is not None:
        common.fail("--all is every folder's server: give no App and no --data-dir")


def _server(load_app: common.LoadApp, target: str | None, data_dir: Path | None
            ) -> EmbeddedServer:
    if data_dir is None and target is not None:
        configured = load_app(target).settings.data_dir
        data_dir = Path(configured) if configured else None
    return EmbeddedServer(data_dir)


def _start(load_app: common.LoadApp) -> Any:
    def start(target: App = None, data_dir: DataDir = None) -> None:
        """Start the embedded server (or find it running) and print its URL."""
        server = _server(load_app, target, data_dir)
        url = server.start()
        typer.echo(url if server.owned else f"{url} (already running)")

    return start


def _status(load_app: common.LoadApp) -> Any:
    def status(target: App = None, data_dir: DataDir = None, every: Every = False,
               as_json: AsJson = False) -> None:
        """Whether the embedded server runs, its pid, socket and what it holds; with
        --all, every one you started (folder, pid, socket, memory, uptime). Exits 3 when
        none is running."""
        if every:
            _no_folder_with_all(target, data_dir)
            _status_all(as_json)
            return
        if as_json:
            common.fail("--json goes with --all")
        found = _server(load_app, target, data_dir).status()
        typer.echo(describe(found))
        if not found.running:
            raise typer.Exit(EXIT_NOT_RUNNING)

    return status


def _stop(load_app: common.LoadApp) -> Any:
    def stop(target: App = None, data_dir: DataDir = None, every: Every = False) -> None:
        """Stop the embedded server: it writes its data out, which the next start reads
        back (a process of the folder that needs it starts it again). With --all, every
        one you started, in any folder."""
        if every:
            _no_folder_with_all(target, data_dir)
            _stop_all()
            return
        server = _server(load_app, target, data_dir)
        if server.stop():
            typer.echo(f"stopped the embedded server in {server.data_dir}")
        else:
            typer.echo(f"no embedded server was running in {server.data_dir}")

    return stop


def _status_all(as_json: bool) -> None:
    found = embedded_fleet.running()
    if as_json:
        common.emit_json([as_dict(server) for server in found])
    elif found:
        common.show(fleet_table(found))
    else:
        typer.echo("no embedded server of yours is running")
    if not found:
        raise typer.Exit(EXIT_NOT_RUNNING)


def _stop_all() -> None:
    done = embedded_fleet.stop_all()
    for each in done:
        if each.error is None:
            typer.echo(f"stopped the embedded server in {each.data_dir} (pid {each.pid})")
        else:
            typer.echo(f"error: {each.error}", err=True)
    if not done:
        typer.echo("no embedded server of yours was running")
    if any(each.error is not None for each in done):
        raise typer.Exit(EXIT_NOT_STOPPED)


def as_dict(server: FleetServer) -> dict[str, Any]:
    """One server of ``status --all --json`` (pure)."""
    return {"data_dir": str(server.data_dir), "pid": server.pid,
            "url": f"unix://{server.socket_path}", "answering": server.answering,
            "rss_bytes": server.rss_bytes, "uptime_seconds": server.uptime_seconds,
            "keys": server.keys}


def fleet_table(found: list[FleetServer]) -> Table:
    """``status --all`` for a person (pure)."""
    table = Table(title="embedded servers you started (stop them: "
                  f"{embedded_registry.command('embedded stop --all')})")
    for column in ("data dir", "pid", "socket", "memory (RSS)", "up", "keys"):
        table.add_column(column, overflow="fold")
    for server in found:
        table.add_row(
            str(server.data_dir), str(server.pid), _socket_shown(server),
            megabytes(server.rss_bytes),
            NONE if server.uptime_seconds is None else duration(server.uptime_seconds),
            "not answering" if not server.answering
            else NONE if server.keys is None else str(server.keys))
    return table


def _socket_shown(server: FleetServer) -> str:
    # Its name alone when it is in the data dir (the column before): the table stays
    # readable in a terminal; --json has the whole URL.
    inside = server.data_dir / SOCKET_NAME
    return SOCKET_NAME if server.socket_path == str(inside) else server.socket_path


def describe(status: ServerStatus) -> str:
    """``status`` for a person (pure)."""
    if not status.running:
        return f"not running (data dir {status.data_dir})"
    return "\n".join([
        f"running: pid {status.pid}, {status.version or 'unknown version'}, "
        f"up {status.uptime_seconds}s",
        f"url:      unix://{status.socket_path}",
        f"data dir: {status.data_dir}",
        f"memory:   {status.used_memory}, {status.keys} keys",
        f"stop it:  {embedded_registry.command('embedded stop')}",
        # Not stop --all: it stops every folder's server; the reader asked about this one.
        f"others:   {embedded_registry.command('embedded status --all')} (every one you "
        "started)",
    ])
