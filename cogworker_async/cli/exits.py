"""The CLI's exit codes and the words for an error a person can act on (``explain``).

A leaf of the CLI: ``cli/__init__.py`` (``main``, the boundary for whatever escapes a
command) and ``cli/run.py`` (which knows its URL and names the server) both translate
errors with it, and neither imports the other's module for it — the sub-commands must not
import the package that registers them (``tests/test_layering.py``: no import cycles).
What each code means, for every command, is in ``cli/__init__.py``'s docstring.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, NoReturn

import typer

from cogworker_async.errors import CogworkerError, why
from cogworker_async.redis import urls
from cogworker_async.redis.errors import REFUSING, UNREACHABLE, NoPermissionError, RedisError

EXIT_OK: Final = 0
EXIT_HARD_STOP: Final = 1
EXIT_USAGE: Final = 2
EXIT_REDIS: Final = 3
EXIT_LIFESPAN: Final = 5
"""``run``: the worker stopped and settled its jobs, then its lifespan raised as it was
exited (``LifespanExitFailed``)."""


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


# -- errors: which exit code, in which words ---------------------------------------------


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside task-group exception groups (or ``exc`` itself)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def explain(exc: BaseException, url: str | None = None) -> tuple[int, str] | None:
    """``(exit code, message)`` for an error a person can act on; None for a bug."""
    where = f"Redis at {urls.mask(url)}" if url else "Redis"
    for leaf in leaves(exc):
        if isinstance(leaf, NoPermissionError):
            return EXIT_REDIS, (f"{where}: the user lacks a permission the worker needs "
                                f"({why(leaf)}); grant it (ACL SETUSER) or use another user")
        if isinstance(leaf, REFUSING):
            return EXIT_REDIS, (f"{where} refused this client ({why(leaf)}); check the "
                                "user name and password in the Redis URL")
        if isinstance(leaf, UNREACHABLE):
            return EXIT_REDIS, (f"cannot reach {where} ({why(leaf)}); is it running, and "
                                "is the URL right?")
        if isinstance(leaf, RedisError):
            return EXIT_REDIS, f"{where} refused: {why(leaf)}"
        if isinstance(leaf, CogworkerError):
            return EXIT_USAGE, str(leaf)
    return None
