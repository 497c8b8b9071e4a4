"""The command line: ``cogworker-async run app:jobs``, ``web`` and the admin commands.

``run`` works until SIGTERM or SIGINT, then shuts down gracefully. A second signal stops
at once: running jobs are cancelled and given back. A Redis that is not up yet when the
worker starts (compose or Kubernetes start it second) is waited for, up to
``--wait-for-redis`` seconds (default 30), said once; a wrong password or a missing
permission is no reason to wait and ends the command at once.

Errors reach a person as one ``error: ...`` line on stderr, never a traceback, with the
password of any Redis URL masked (``urls.mask``). Exit codes, for every command:

    0  done; ``run``: stopped cleanly (SIGTERM/SIGINT: jobs finished or were given back)
    1  ``run``: stopped hard by a second signal (running jobs cancelled, given back);
       admin commands: some named entry was gone or refused
    2  usage or configuration error: a bad option or setting, an App module that fails
       to import, a target that is not an App, an unsupported Redis URL, a server too
       old for reliable fetch
    3  Redis unreachable or refusing: connection refused or timed out (after
       ``--wait-for-redis``), a wrong password, a user lacking a permission (NOPERM)
    4  ``run`` under ``--processes``: stopped after ``--max-jobs`` (replace me);
       ``job``: unknown jid
    5  ``run``: the worker stopped and settled its jobs, then its lifespan raised as
       it was exited (``LifespanExitFailed``)

The translation lives in two places: ``run`` (``cli/run.py``) knows its URL and says
which server failed; ``main`` is the boundary for everything else that escapes a command
(the admin commands, registered from ``cli/admin.py`` and its siblings, included). Both
use ``explain`` (``cli/exits.py``, with the exit codes: a leaf the sub-commands import).

Each command but ``version`` lives in a module of its own and is registered here with
``load_app``: ``run`` (``cli/run.py``), ``web`` (``cli/web.py``), the admin commands.
This package imports them; they never import it (no import cycles).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import traceback
from typing import Annotated, Any

import typer
import typer.core

from cogworker_async.app import App
from cogworker_async.cli import run as run_command
from cogworker_async.cli.exits import EXIT_HARD_STOP, EXIT_OK, EXIT_REDIS, EXIT_USAGE, explain, fail
from cogworker_async.cli.run import (
    MAX_PORT,
    REDIS_RETRY_PAUSE,
    THREAD_EXIT_GRACE,
    WAIT_FOR_REDIS,
    NotReachable,
)
from cogworker_async.errors import why
from cogworker_async.redis.embedded import quiet_start_notice
from cogworker_async.version import __version__

# What this package offered before ``run``, ``web`` and the exit codes moved to modules of
# their own: still importable from here (``from cogworker_async.cli import explain``).
# ``run`` and ``web`` now name those modules; the command functions are theirs.
__all__ = [
    "EXIT_HARD_STOP", "EXIT_OK", "EXIT_REDIS", "EXIT_USAGE", "MAX_PORT", "REDIS_RETRY_PAUSE",
    "THREAD_EXIT_GRACE", "WAIT_FOR_REDIS", "NotReachable", "cli", "explain", "fail",
    "load_app", "main", "version",
]



def load_app(target: str) -> App:
    """``"package.module:attribute"`` -> the App it names (from the current directory).

    Any failure is a ``typer.BadParameter`` in one line: the module's own exception
    (whatever it is: a module that raises on import is a configuration error) and where
    it was raised."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise typer.BadParameter(f"{target!r}: expected MODULE:ATTRIBUTE, e.g. app:jobs")
    if module_name.endswith(".py"):  # a file's name, typed as a module's
        dotted = module_name.removesuffix(".py").replace(os.sep, ".")
        raise typer.BadParameter(f"{target!r}: a module, not a file: drop the .py: "
                                 f"{dotted}:{attribute}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise typer.BadParameter(
            f"cannot import {module_name!r}: {why(exc)}{_raised_at(exc)} "
            f"(python -c 'import {module_name}' shows the traceback)") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        found = "nothing" if app is None else f"an object of type {type(app).__name__}"
        raise typer.BadParameter(f"{target!r} is not a cogworker_async.App (found {found})"
                                 f"{_apps_there(module_name, vars(module))}")
    return app


def _apps_there(module_name: str, names: dict[str, object]) -> str:
    """``; did you mean app:jobs?`` when the module holds an App under another name
    (``app:job`` for ``app:jobs``): the fix, rather than a hunt through the module."""
    apps = [f"{module_name}:{name}" for name, value in names.items() if isinstance(value, App)]
    return f"; did you mean {' or '.join(apps)}?" if apps else ""


def _raised_at(exc: BaseException) -> str:
    """`` (at path:line)`` of the user's code that raised ``exc``; "" when it was the
    import machinery (a module that does not exist)."""
    machinery = os.path.dirname(importlib.__file__) + os.sep
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(("<frozen", machinery)) and f.filename != __file__]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def _typer() -> typer.Typer:
    commands = typer.Typer(
        name="cogworker-async",
        help="An asyncio-native background job worker on Redis.",
        no_args_is_help=True,
        add_completion=False,
    )
    commands.callback()(_options)
    return commands


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(__version__)
        raise typer.Exit()


def _options(
    show_version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", is_eager=True,
        callback=_print_version)] = False,
) -> None:
    """An asyncio-native background job worker on Redis."""


def version() -> None:
    """Print the version."""
    typer.echo(__version__)


def _every_command() -> typer.Typer:
    """The whole command line. The admin commands' modules import the admin model, rich
    and the tables: loaded only when one of them (or the list of commands) is asked for."""
    from cogworker_async.cli import admin as admin_commands
    from cogworker_async.cli import batch as batch_command
    from cogworker_async.cli import embedded as embedded_commands
    from cogworker_async.cli import job as job_command
    from cogworker_async.cli import metrics as metrics_commands
    from cogworker_async.cli import migrate as migrate_command
    from cogworker_async.cli import outbox as outbox_command
    from cogworker_async.cli import web as web_command

    every = _typer()
    run_command.register(every, load_app)  # run: work jobs (or supervise --processes workers)
    web_command.register(every, load_app)  # web: the dashboard
    admin_commands.register(every, load_app)  # stats, queues, scheduled, retries, dead, ...
    migrate_command.register(every, load_app)  # migrate-keys (from the first key layout)
    metrics_commands.register(every, load_app)  # metrics-summary (runs per job class)
    job_command.register(every, load_app)  # job JID [--cancel]: one job's status record
    batch_command.register(every, load_app)  # batch BID [--cancel]: one batch's status
    outbox_command.register(every, load_app)  # outbox-relay: the outbox relay alone
    metrics_commands.register_exporter(every, load_app)  # metrics: the system-wide gauges
    embedded_commands.register(every, load_app)  # embedded start|status|stop
    every.command()(version)
    return _plain_help(every)


def _run_only() -> typer.Typer:
    """``run`` and ``version``: what a worker's start needs (two commands, so that typer
    keeps ``run`` a sub-command), a fifth less to import than the whole command line."""
    only = _typer()
    run_command.register(only, load_app)
    only.command()(version)
    return _plain_help(only)


def _plain_help(commands: typer.Typer) -> typer.Typer:
    """Each command's help as a person reads it: a docstring's paragraphs with their
    lines joined (the terminal wraps them), and no reStructuredText markup."""
    for info in commands.registered_commands:
        info.cls = _PlainUsage
        text = info.help or inspect.getdoc(info.callback) or ""
        paragraphs = [" ".join(part.split()) for part in text.split("\n\n")]
        info.help = "\n\n".join(paragraphs).replace("``", "'")
    for group in commands.registered_groups:  # ``embedded start|status|stop``
        if group.typer_instance is not None:
            _plain_help(group.typer_instance)
    return commands


class _PlainUsage(typer.core.TyperCommand):
    """A usage line as in every other tool's help: ``run [OPTIONS] APP``. typer (0.28)
    writes a required argument as ``{target}``, which a newcomer reads as a literal to
    type, braces and all. (``ctx`` untyped: typer's context is vendored click's in one
    release, click's own in another.)"""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [piece[1:-1].upper() if piece.startswith("{") and piece.endswith("}")
                else piece for piece in super().collect_usage_pieces(ctx)]


def _commands_for(argv: list[str]) -> typer.Typer:
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    return _run_only() if first in ("run", "version") else _every_command()


cli: typer.Typer


def __getattr__(name: str) -> object:
    # ``cli``, the whole command line, is built on first use (the tests' CliRunner):
    # ``main`` builds only what the command it runs needs.
    if name == "cli":
        built = globals()["cli"] = _every_command()
        return built
    raise AttributeError(f"module 'cogworker_async.cli' has no attribute {name!r}")


def main() -> None:
    """The ``cogworker-async`` entry point, and the one boundary for errors that escape
    a command: a Redis or configuration error is one line and its exit code (see the
    module docstring); anything else is a bug and keeps its traceback."""
    quiet_start_notice()  # a command logs or prints a start itself: no script's notice
    try:
        _commands_for(sys.argv[1:])()
    except Exception as exc:
        explained = explain(exc)
        if explained is None:
            raise
        code, message = explained
        typer.echo(f"error: {message}", err=True)
        sys.exit(code)
