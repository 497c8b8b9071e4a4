"""What every admin command shares: the App it names (``open_app``), a fresh event loop
with the one error boundary (``run_in_loop``), output for a person (``show``) or a script
(``emit_json``), and the option aliases.

Errors are translated at one boundary, ``run_in_loop``: nothing leaves as a traceback.

Exit codes: 0 done; 1 some named entry was gone (it ran, another process moved it) or
was refused; 2 bad usage (a malformed token, a bad page, an unknown App); 3 Redis out of
reach or refusing (a wrong password, a missing permission); with ``error: ...`` on stderr.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Final, NoReturn, TypeVar

import anyio
import typer
from rich.console import Console, RenderableType

from cogworker_async.admin.api import Inspector
from cogworker_async.admin.records import (
    MAX_PAGE_SIZE,
    TOKEN_DIGEST_LENGTH,
    Done,
    printable,
)
from cogworker_async.app import App
from cogworker_async.errors import CogworkerError
from cogworker_async.jobs.status import check_jid
from cogworker_async.redis.errors import AuthenticationError, ConnectionLost, RedisError
from cogworker_async.redis.urls import mask

T = TypeVar("T")
LoadApp = Callable[[str], App]

EXIT_PARTIAL: Final = 1
"""Some named entry was gone or refused; the rest was done."""
EXIT_USAGE: Final = 2
"""Nothing was done: bad usage."""
EXIT_REDIS: Final = 3
"""Nothing was done: Redis could not be reached, or refused (as for ``run``)."""
SETS: Final = ("scheduled", "retries", "dead")

Target = Annotated[str, typer.Argument(metavar="APP", help="The App, as MODULE:ATTRIBUTE.")]
RedisUrl = Annotated[str | None, typer.Option(help="Redis URL (else the App's).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON (and nothing else).")]
PageNumber = Annotated[int, typer.Option("--page", help="Page to show (from 1).")]
PageSize = Annotated[int, typer.Option("--size", help=f"Entries a page (1..{MAX_PAGE_SIZE}).")]
RetryTokens = Annotated[list[str] | None, typer.Option(
    "--retry", metavar="TOKEN", help="Put this entry on its queue now (repeatable; its "
    "jid names it too).")]
DeleteTokens = Annotated[list[str] | None, typer.Option(
    "--delete", metavar="TOKEN", help="Delete this entry (repeatable; in the scheduled, "
    "retry and dead sets its jid names it too).")]
KillTokens = Annotated[list[str] | None, typer.Option(
    "--kill", metavar="TOKEN", help="Move this entry to dead (repeatable; not for dead; "
    "its jid names it too).")]
RetryAll = Annotated[bool, typer.Option("--retry-all", help="Put every entry on its queue now.")]
DeleteAll = Annotated[bool, typer.Option("--delete-all", help="Delete every entry.")]
KillAll = Annotated[bool, typer.Option("--kill-all",
                                       help="Move every entry to dead (not for dead).")]
Clear = Annotated[bool, typer.Option("--clear", help="Delete every job on queue NAME.")]
PauseQueue = Annotated[bool, typer.Option(
    "--pause", help="Pause queue NAME: no worker starts its jobs until --resume.")]
ResumeQueue = Annotated[bool, typer.Option("--resume", help="Resume queue NAME.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
Search = Annotated[str | None, typer.Option(help="Only entries whose JSON holds TERM.")]


# Everything this module prints goes through ``printable``: stored text may hold lone
# surrogates (a JSON "\ud800" escape decodes to one), which UTF-8 output cannot encode;
# the command would die with a traceback halfway through its output.


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    typer.echo(printable(f"error: {message}"), err=True)
    raise typer.Exit(code)


def emit_json(value: Any) -> None:
    # Python's JSON reads and writes NaN and Infinity (a payload holding them, a score
    # of +inf), but they are not JSON: a script's parser would refuse the whole output.
    # Written as null (a round trip through the C codec: no recursion of ours).
    finite = json.loads(json.dumps(value), parse_constant=lambda _: None)
    typer.echo(printable(json.dumps(finite, indent=2, ensure_ascii=False, allow_nan=False)))


PIPE_WIDTH: Final = 160
"""Columns for tables written to a pipe or file (rich would assume 80 and crop them)."""


def show(renderable: RenderableType) -> None:
    # No markup and no emoji codes: the tables hold stored text (arguments, errors,
    # class names), which prints as it is — ``[/x]`` is not markup, ``:thumbs_up:`` not
    # an emoji (tests/cli/test_bad_data.py).
    console = Console(markup=False, emoji=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPE_WIDTH, markup=False, emoji=False)
    with console.capture() as captured:  # rendered whole, then made printable
        console.print(renderable)
    # The colours rich chose (a terminal, FORCE_COLOR) are kept: echo would strip them
    # on a pipe, where rich was told to colour all the same.
    typer.echo(printable(captured.get()), nl=False, color=console.color_system is not None)


# -- the boundary: App, event loop, errors ----------------------------------------------


def open_app(load_app: LoadApp, target: str, redis_url: str | None) -> App:
    """The App ``target`` names, for a command (a bad target: ``fail``); on another
    server if ``redis_url`` says. Shared by every command that reads an App."""
    try:
        app = load_app(target)
    except typer.BadParameter as exc:
        fail(exc.format_message())
    if not redis_url:
        return app
    # Same namespace and jobs on another server: a copy, so that the module's App stays
    # as its code made it.
    moved = App(redis_url, settings=app.settings)
    moved.registry.update(app.registry)
    moved.periodics.update(app.periodics)
    return moved


def run_in_loop(app: App, work: Callable[[Inspector], Awaitable[T]]) -> T:
    """Run ``work`` in a fresh event loop, close the App's pools, translate errors."""
    try:
        url = app.redis_url()  # resolved now, to name it if it cannot be reached
    except CogworkerError as exc:
        fail(str(exc))
    try:
        return anyio.run(_within, app, work)
    except AuthenticationError as exc:  # a ConnectionError to redis-py, not to a person
        fail(f"Redis at {mask(url)} refused the credentials: {exc}", EXIT_REDIS)
    except ConnectionLost as exc:
        fail(f"cannot reach Redis at {mask(url)}: {exc}", EXIT_REDIS)
    except RedisError as exc:
        fail(f"Redis at {mask(url)} refused: {type(exc).__name__}: {exc}", EXIT_REDIS)
    except (CogworkerError, ValueError) as exc:
        # The read model's answer to bad input (page bounds, queue names, tokens,
        # search terms) and the App's to bad settings: usage, not a crash.
        fail(str(exc))


async def _within(app: App, work: Callable[[Inspector], Awaitable[T]]) -> T:
    try:
        return await work(Inspector(app))
    finally:
        await app.close()


def confirm(question: str, yes: bool) -> None:
    """Ask on stderr (stdout may be JSON for a script); no answer (EOF) means no."""
    if yes:
        return
    try:
        agreed = typer.confirm(question, default=False, err=True)
    except typer.Abort:
        agreed = False
    if not agreed:
        typer.echo("nothing done (pass --yes to skip the question)", err=True)
        raise typer.Exit(EXIT_PARTIAL)


def check_tokens(tokens: list[str], *, position: bool, jids: bool = False) -> list[str]:
    """Every token well formed, before anything is done: a typo in the third token must
    not leave the first two acted on and the rest not. ``position``: queue tokens
    (``position:digest``); else set tokens (``score:digest``). ``jids``: a value that is
    no token may be a jid instead (``is_token`` tells them apart)."""
    for token in tokens:
        if is_token(token, position=position):
            continue
        if jids and _is_jid(token):
            continue
        fail(f"not an entry token{' or jid' if jids else ''}: {token!r} (copy one from "
             "the token column)")
    return tokens


def is_token(token: str, *, position: bool) -> bool:
    """Whether ``token`` is an entry's token (else, where jids are taken, a jid)."""
    return _well_formed(token, position=position)


def _is_jid(value: str) -> bool:
    try:
        check_jid(value)
    except ValueError:
        return False
    return True


def _well_formed(token: str, *, position: bool) -> bool:
    where, _, hashed = token.rpartition(":")
    try:
        int(where) if position else float(where)
        int(hashed, 16)
    except ValueError:
        return False
    return len(hashed) == TOKEN_DIGEST_LENGTH


def one_action(**chosen: object) -> str | None:
    named = [name for name, value in chosen.items() if value]
    if len(named) > 1:
        fail("one action at a time: " + ", ".join(f"--{n.replace('_', '-')}" for n in named))
    return named[0] if named else None


def report(action: str, done: Done, as_json: bool) -> None:
    """What an action did; exit 1 if some named entry was gone or refused."""
    if as_json:
        emit_json({"action": action, "done": done.done, "gone": done.missing,
                   "refused": done.refused})
    else:
        typer.echo(f"{action}: {done.done} done")
        if done.missing:
            typer.echo(f"{done.missing} gone: nothing there by that token any more "
                       "(it ran, or another process moved it)")
        for reason in done.refused:
            typer.echo(f"refused {reason}")
    if done.missing or done.refused:
        raise typer.Exit(EXIT_PARTIAL)
