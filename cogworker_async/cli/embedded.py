"""``cogworker-async embedded start|status|stop``: the folder's embedded server by hand.

Any process of the folder starts the server when it needs one, and the server outlives
it (``embedded.py``); these commands are for a person: ``status`` says whether one runs
and what it holds, ``stop`` ends it (its data stays in the data dir for the next start),
``start`` starts it ahead of time and prints its URL.

The data dir is ``--data-dir``, else an App's own ``data_dir`` when one is named
(``cogworker-async embedded status app:jobs``), else ``$COGWORKER_DATA_DIR``, else
``./.cogworker``. Exit codes: 0 done (``status``: running), 2 usage, 3 (``status``) no
server running, as ``systemctl status`` says 3 for a unit that is not active.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final

import typer

from cogworker_async.cli import common
from cogworker_async.redis.embedded import EmbeddedServer, ServerStatus

EXIT_NOT_RUNNING: Final = 3

App = Annotated[str | None, typer.Argument(
    help="MODULE:ATTRIBUTE of an App whose data_dir to use (optional).",
    show_default=False)]
DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", help="The data dir (default: $COGWORKER_DATA_DIR, else ./.cogworker).",
    show_default=False)]


def register(cli: typer.Typer, load_app: common.LoadApp) -> None:
    group = typer.Typer(name="embedded", no_args_is_help=True,
                        help="The folder's embedded server: start, status, stop.")
    group.command(name="start")(_start(load_app))
    group.command(name="status")(_status(load_app))
    group.command(name="stop")(_stop(load_app))
    cli.add_typer(group)


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
    def status(target: App = None, data_dir: DataDir = None) -> None:
        """Whether the embedded server runs, its pid, socket and what it holds. Exits 3
        when none is running."""
        found = _server(load_app, target, data_dir).status()
        typer.echo(describe(found))
        if not found.running:
            raise typer.Exit(EXIT_NOT_RUNNING)

    return status


def _stop(load_app: common.LoadApp) -> Any:
    def stop(target: App = None, data_dir: DataDir = None) -> None:
        """Stop the embedded server: it writes its data out, which the next start reads
        back (a process of the folder that needs it starts it again)."""
        server = _server(load_app, target, data_dir)
        if server.stop():
            typer.echo(f"stopped the embedded server in {server.data_dir}")
        else:
            typer.echo(f"no embedded server was running in {server.data_dir}")

    return stop


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
        "stop it:  cogworker-async embedded stop",
    ])
