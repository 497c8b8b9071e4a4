"""The command line: ``cogworker-async run app:jobs``.

``run`` works until SIGTERM or SIGINT, then shuts down gracefully (exit 0). A second
signal stops at once: running jobs are cancelled and given back (exit 1).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Final

import anyio
import typer

from cogworker_async import admin_cli
from cogworker_async.app import App
from cogworker_async.errors import CogworkerError
from cogworker_async.version import __version__
from cogworker_async.worker.manager import Manager

log = logging.getLogger("cogworker_async")

THREAD_EXIT_GRACE: Final = 1.0
"""Seconds idle job threads get to end at exit before the CLI stops waiting for them."""

cli = typer.Typer(
    name="cogworker-async",
    help="An asyncio-native background job worker on Redis.",
    no_args_is_help=True,
    add_completion=False,
)


def load_app(target: str) -> App:
    """``"package.module:attribute"`` -> the App it names (from the current directory)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise typer.BadParameter(f"{target!r}: expected MODULE:ATTRIBUTE, e.g. app:jobs")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise typer.BadParameter(f"cannot import {module_name!r}: {exc}") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise typer.BadParameter(f"{target!r} is not a cogworker_async.App")
    return app


async def _watch_signals(manager: Manager, signals: AsyncIterator[int]) -> None:
    async for signum in signals:
        if not manager.stopping:
            log.info("%s: stopping (jobs get %.0fs; signal again to stop at once)",
                     signal.Signals(signum).name, manager.settings.shutdown_timeout)
            manager.stop()
        else:
            log.warning("%s again: stopping now", signal.Signals(signum).name)
            manager.hard_stop()


async def _serve(app: App, overrides: dict[str, Any]) -> bool:
    """Run a worker until a signal stops it; True if it stopped gracefully."""
    # The handlers go in before the worker starts. Installed by the watcher task, they
    # came a moment after the Manager had begun fetching: a SIGTERM in between killed the
    # process outright (exit -15, no hand-over, fetched jobs left in progress). A signal
    # that arrives while the worker starts now waits in the receiver and stops it as soon
    # as it runs.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with app.worker(**overrides) as manager, anyio.create_task_group() as tg:
            tg.start_soon(_watch_signals, manager, signals)
            await manager.wait_stopped()
            tg.cancel_scope.cancel()
        await app.close()
    return not manager.stopped_hard


@cli.command()
def run(
    target: Annotated[str, typer.Argument(help="The App to run, as MODULE:ATTRIBUTE.")],
    concurrency: Annotated[int | None, typer.Option(help="Jobs run at once.")] = None,
    queue: Annotated[
        list[str] | None,
        typer.Option("--queue", "-q", help="Queue to work (repeatable, in order)."),
    ] = None,
    redis_url: Annotated[str | None, typer.Option(help="Redis URL (else the App's).")] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR.")] = "INFO",
) -> None:
    """Work jobs until SIGTERM/SIGINT, then shut down gracefully."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = load_app(target)
    overrides: dict[str, Any] = {}
    if concurrency is not None:
        overrides["concurrency"] = concurrency
    if queue:
        overrides["queues"] = tuple(queue)
    if redis_url:
        overrides["redis_url"] = redis_url
    try:
        # uvloop (the ``speed`` extra) when installed: a good share less CPU per job.
        uvloop = importlib.util.find_spec("uvloop") is not None
        graceful = anyio.run(_serve, app, overrides, backend_options={"use_uvloop": uvloop})
    except CogworkerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    _leave_abandoned_threads(0 if graceful else 1)
    raise typer.Exit(0 if graceful else 1)


def _leave_abandoned_threads(status: int) -> None:
    """Exit now if a plain-function job's thread still runs after the worker stopped.

    Such a thread was abandoned at the shutdown deadline and its job given back (see
    ``Processor._call``); a normal exit would join it, holding the process for as long
    as the function runs, past ``shutdown_timeout`` and past a second signal. Idle
    threads get ``THREAD_EXIT_GRACE`` to end first.
    """
    deadline = time.monotonic() + THREAD_EXIT_GRACE
    for thread in _other_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    lingering = _other_threads()
    if not lingering:
        return
    log.warning("exiting with %d job thread(s) still running; their jobs were given back",
                len(lingering))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _other_threads() -> list[threading.Thread]:
    current = threading.current_thread()
    return [t for t in threading.enumerate()
            if t is not current and not t.daemon and t.is_alive()]


@cli.command()
def web(
    target: Annotated[str, typer.Argument(help="The App to show, as MODULE:ATTRIBUTE.")],
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless told).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR.")] = "INFO",
) -> None:
    """Serve the web dashboard (needs the ``web`` extra) until SIGTERM/SIGINT."""
    try:
        from cogworker_async.web import serve
    except ImportError as exc:
        typer.echo(f"error: the dashboard needs the web extra "
                   f"(pip install 'cogworker-async[web]'): {exc}", err=True)
        raise typer.Exit(2) from None
    app = load_app(target)
    try:
        serve(app, host=host, port=port, log_level=log_level.lower())
    except CogworkerError as exc:  # e.g. a malformed $COGWORKER_WEB_AUTH: refuse to
        # serve at all rather than serve without the protection that was asked for
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


admin_cli.register(cli, load_app)  # stats, queues, scheduled, retries, dead, ...


@cli.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


def main() -> None:
    cli()
