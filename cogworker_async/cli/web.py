"""``cogworker-async web app:jobs``: serve the dashboard (``cogworker_async.web``, the
``web`` extra) until SIGTERM/SIGINT.

Registered by ``cli/__init__.py`` as its siblings are (``register``): it gets
``load_app`` from there, rather than importing the package that imports it. A target
that is not an App is typer's usage error (``load_app`` raises ``BadParameter``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from cogworker_async.cli.exits import EXIT_USAGE, fail
from cogworker_async.errors import CogworkerError, install_extra

if TYPE_CHECKING:
    from cogworker_async.cli.common import LoadApp  # which imports the admin model


def register(cli: typer.Typer, load_app: LoadApp) -> None:
    """Add ``web`` to ``cli`` (``load_app`` resolves MODULE:ATTRIBUTE). Its options are
    annotated in place: typer reads the annotations as strings in this module's globals."""
    cli.command(name="web")(_command(load_app))


def _command(load_app: LoadApp) -> Callable[..., None]:
    def web(
        target: Annotated[str, typer.Argument(help="The App to show, as MODULE:ATTRIBUTE.")],
        host: Annotated[str, typer.Option(help="Address to bind (loopback unless told).")]
        = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
        log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR.")] = "INFO",
    ) -> None:
        """Serve the web dashboard (needs the web extra) until SIGTERM/SIGINT."""
        try:
            from cogworker_async.web import serve
        except ImportError as exc:
            typer.echo(f"error: the dashboard needs the web extra ({exc}); "
                       f"{install_extra('web')}", err=True)
            raise typer.Exit(2) from None
        app = load_app(target)
        try:
            serve(app, host=host, port=port, log_level=log_level.lower())
        except CogworkerError as exc:  # e.g. a malformed $COGWORKER_WEB_AUTH: refuse to
            # serve at all rather than serve without the protection that was asked for
            fail(str(exc), EXIT_USAGE)

    return web
