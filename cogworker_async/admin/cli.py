"""The admin CLI: ``stats``, ``queues``, ``scheduled``, ``retries``, ``dead``, ``processes``,
``periodic`` and ``limits`` — what the dashboard shows, as tables for a person or
``--json`` for a script, and its actions (retry, delete, kill on entries named by their
tokens; pause and resume a queue).

Every read and action goes through ``Inspector``, the dashboard's model: an action finds
exactly the entry the user saw, or reports it gone, and never touches another one.
Errors are translated at one boundary, ``_run``: nothing leaves as a traceback.

Exit codes: 0 done; 1 some named entry was gone (it ran, another process moved it) or
was refused; 2 bad usage (a malformed token, a bad page, an unknown App); 3 Redis out of
reach or refusing (a wrong password, a missing permission); with ``error: ...`` on stderr.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Final, NoReturn, TypeVar

import anyio
import typer
from rich.console import Console, RenderableType

from cogworker_async.admin import job_cli, metrics_cli, migrate_cli, tables
from cogworker_async.admin.api import Inspector
from cogworker_async.admin.records import (
    MAX_PAGE_SIZE,
    PAGE_SIZE,
    TOKEN_DIGEST_LENGTH,
    DayTotals,
    Done,
    JobRecord,
    Page,
    printable,
)
from cogworker_async.admin.sets import JobSet
from cogworker_async.app import App
from cogworker_async.errors import CogworkerError
from cogworker_async.redis.errors import AuthenticationError, ConnectionLost, RedisError
from cogworker_async.settings import check_queue_name
from cogworker_async.urls import mask

T = TypeVar("T")
LoadApp = Callable[[str], App]

EXIT_PARTIAL: Final = 1
"""Some named entry was gone or refused; the rest was done."""
EXIT_USAGE: Final = 2
"""Nothing was done: bad usage."""
EXIT_REDIS: Final = 3
"""Nothing was done: Redis could not be reached, or refused (as for ``run``)."""
SETS: Final = ("scheduled", "retries", "dead")

Target = Annotated[str, typer.Argument(help="The App, as MODULE:ATTRIBUTE.")]
RedisUrl = Annotated[str | None, typer.Option(help="Redis URL (else the App's).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON (and nothing else).")]
PageNumber = Annotated[int, typer.Option("--page", help="Page to show (from 1).")]
PageSize = Annotated[int, typer.Option("--size", help=f"Entries a page (1..{MAX_PAGE_SIZE}).")]
RetryTokens = Annotated[list[str] | None, typer.Option(
    "--retry", metavar="TOKEN", help="Put this entry on its queue now (repeatable).")]
DeleteTokens = Annotated[list[str] | None, typer.Option(
    "--delete", metavar="TOKEN", help="Delete this entry (repeatable).")]
KillTokens = Annotated[list[str] | None, typer.Option(
    "--kill", metavar="TOKEN", help="Move this entry to dead (repeatable; not for dead).")]
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


def _run(app: App, work: Callable[[Inspector], Awaitable[T]]) -> T:
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


def _confirm(question: str, yes: bool) -> None:
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


def check_tokens(tokens: list[str], *, position: bool) -> list[str]:
    """Every token well formed, before anything is done: a typo in the third token must
    not leave the first two acted on and the rest not. ``position``: queue tokens
    (``position:digest``); else set tokens (``score:digest``)."""
    for token in tokens:
        if not _well_formed(token, position=position):
            fail(f"not an entry token: {token!r} (copy one from the token column)")
    return tokens


def _well_formed(token: str, *, position: bool) -> bool:
    where, _, hashed = token.rpartition(":")
    try:
        int(where) if position else float(where)
        int(hashed, 16)
    except ValueError:
        return False
    return len(hashed) == TOKEN_DIGEST_LENGTH


def _one_action(**chosen: object) -> str | None:
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


# -- commands -----------------------------------------------------------------------------


def register(cli: typer.Typer, load_app: LoadApp) -> None:
    """Add the admin commands to ``cli`` (``load_app`` resolves MODULE:ATTRIBUTE).

    Each command is made by a factory below. Their options are module-level aliases:
    typer reads annotations as strings, in this module's globals, not in a closure."""
    cli.command(name="stats")(_stats_command(load_app))
    cli.command(name="queues")(_queues_command(load_app))
    for which in SETS:
        cli.command(name=which, help=_SET_HELP[which])(_set_command(load_app, which))
    cli.command(name="processes")(_processes_command(load_app))
    cli.command(name="periodic")(_periodic_command(load_app))
    cli.command(name="limits")(_limits_command(load_app))
    migrate_cli.register(cli, load_app)  # migrate-keys (from the 0.1 key layout)
    metrics_cli.register(cli, load_app)  # metrics-summary (runs per job class)
    job_cli.register(cli, load_app)  # job JID [--cancel]: one job's status record


def _stats_command(load_app: LoadApp) -> Callable[..., None]:
    def stats(
        target: Target, redis_url: RedisUrl = None, as_json: AsJson = False,
        days: Annotated[int, typer.Option(
            help="Also show processed/failed per day for the last N days (UTC, 1..366).",
        )] = 0,
    ) -> None:
        """Totals, sizes, processes and the Redis server; a table of queues."""
        if not 0 <= days <= 366:
            fail(f"--days must be 0..366, got {days}")

        async def read(insp: Inspector) -> tuple[dict[str, Any], dict[str, Any],
                                                 list[DayTotals]]:
            history = await insp.stats.history(days) if days else []
            return await insp.summary(), await insp.server(), history

        summary, server, history = _run(open_app(load_app, target, redis_url), read)
        if as_json:
            extra = {"history": [dataclasses.asdict(day) for day in history]} if days else {}
            emit_json({**summary, "server": server, **extra})
        else:
            show(tables.stats(summary, server, history))

    return stats


def _queues_command(load_app: LoadApp) -> Callable[..., None]:
    def queues(
        target: Target,
        name: Annotated[str | None, typer.Argument(help="A queue: show its jobs.")] = None,
        page: PageNumber = 1, size: PageSize = PAGE_SIZE,
        delete: DeleteTokens = None, clear: Clear = False,
        pause: PauseQueue = False, resume: ResumeQueue = False,
        yes: Yes = False, redis_url: RedisUrl = None, as_json: AsJson = False,
    ) -> None:
        """Queues (size, latency, paused), or a page of one queue's jobs; delete, clear,
        pause or resume."""
        action = _one_action(delete=delete, clear=clear, pause=pause, resume=resume)
        if name is None:
            if action:
                fail(f"--{action} needs a queue NAME")
            _show_queues(open_app(load_app, target, redis_url), as_json)
            return
        try:
            queue = check_queue_name(name)
        except ValueError as exc:
            fail(str(exc))
        if action == "clear":
            _confirm(f"Delete every job on queue {queue!r}?", yes)
        app = open_app(load_app, target, redis_url)
        if delete:
            tokens = check_tokens(delete, position=True)
            report("delete", _run(app, lambda insp: insp.queue(queue).delete(tokens)), as_json)
        elif clear:
            count = _run(app, lambda insp: insp.queue(queue).clear())
            report("clear", Done(count), as_json)
        elif pause or resume:
            if pause and not _run(app, lambda insp: _in_use(insp, queue)):
                # A pause has no TTL: a typo's would sit in Redis for good, doing nothing.
                _confirm(f"No worker of this App serves queue {queue!r} and no job was "
                         "ever enqueued on it (a typo?): pause it anyway?", yes)
            _pause_or_resume(app, queue, "pause" if pause else "resume", as_json)
        else:
            _show_queue_page(app, queue, page, size, as_json)

    return queues


async def _in_use(insp: Inspector, queue: str) -> bool:
    """A queue the App knows (its settings', its jobs') or one Redis has registered."""
    return queue in insp.known_queues() or queue in await insp.queues.names()


def _pause_or_resume(app: App, queue: str, action: str, as_json: bool) -> None:
    """Pause or resume; saying so when it already was (exit 0: the state asked for
    holds either way)."""
    changed = _run(app, lambda insp: getattr(insp.queues, action)(queue))
    state = "paused" if action == "pause" else "running"
    if as_json:
        emit_json({"action": action, "queue": queue, "changed": changed, "state": state})
    else:
        typer.echo(f"queue {queue}: {state}" + ("" if changed else " (it already was)"))


def _processes_command(load_app: LoadApp) -> Callable[..., None]:
    def processes(target: Target, redis_url: RedisUrl = None, as_json: AsJson = False) -> None:
        """Worker processes (busy, beats, lag, memory), their running jobs, recoveries."""
        _show_processes(open_app(load_app, target, redis_url), as_json)

    return processes


def _periodic_command(load_app: LoadApp) -> Callable[..., None]:
    def periodic(target: Target, redis_url: RedisUrl = None, as_json: AsJson = False) -> None:
        """Periodic jobs: schedule, timezone, next and last run, running now."""
        found = _run(open_app(load_app, target, redis_url), lambda insp: insp.periodic.all())
        if as_json:
            emit_json({"periodic": [dataclasses.asdict(p) for p in found]})
        else:
            show(tables.periodic(found, time.time()))

    return periodic


def _limits_command(load_app: LoadApp) -> Callable[..., None]:
    def limits(target: Target, redis_url: RedisUrl = None, as_json: AsJson = False) -> None:
        """Rate limiters: kind, what each allows, in use now, recent refusals."""
        found = _run(open_app(load_app, target, redis_url), lambda insp: insp.limits.all())
        if as_json:
            emit_json({"limits": [dataclasses.asdict(usage) for usage in found]})
        else:
            show(tables.limits(found))

    return limits


_SET_HELP: Final = {
    "scheduled": "Jobs to run later (soonest first); --retry enqueues them now.",
    "retries": "Failed jobs waiting for their next try (soonest first).",
    "dead": "Jobs that will not run again unless retried (newest first).",
}


_BULK_QUESTION: Final = {
    "retry_all": "Put every entry of {which} on its queue now?",
    "delete_all": "Delete every entry of {which}?",
    "kill_all": "Move every entry of {which} to dead?",
}


def _set_command(load_app: LoadApp, which: str) -> Callable[..., None]:
    """The command for one job set: a page or a search, or one action."""

    def command(
        target: Target, page: PageNumber = 1, size: PageSize = PAGE_SIZE,
        search: Search = None, retry: RetryTokens = None, delete: DeleteTokens = None,
        kill: KillTokens = None, retry_all: RetryAll = False,
        delete_all: DeleteAll = False, kill_all: KillAll = False, yes: Yes = False,
        redis_url: RedisUrl = None, as_json: AsJson = False,
    ) -> None:
        tokens = {"retry": retry, "delete": delete, "kill": kill}
        action = _one_action(**tokens, retry_all=retry_all, delete_all=delete_all,
                             kill_all=kill_all)
        if action is None:
            _show_set(open_app(load_app, target, redis_url), which, page, size, search, as_json)
            return
        if which == "dead" and action.startswith("kill"):
            fail("dead jobs are dead already: --kill is for scheduled and retries")
        named = tokens.get(action)
        if named is not None:
            checked = check_tokens(named, position=False)
            done = _run(open_app(load_app, target, redis_url),
                        lambda insp: _act(insp.job_set(which), action, checked))
        else:
            _confirm(_BULK_QUESTION[action].format(which=which), yes)
            done = _run(open_app(load_app, target, redis_url),
                        lambda insp: _act_on_all(insp.job_set(which), action))
        report(action.replace("_", "-"), done, as_json)

    return command


async def _act(job_set: JobSet, action: str, tokens: list[str]) -> Done:
    acts = {"retry": job_set.retry, "delete": job_set.delete, "kill": job_set.kill}
    return await acts[action](tokens)


async def _act_on_all(job_set: JobSet, action: str) -> Done:
    if action == "delete_all":
        return Done(await job_set.delete_all())
    return await (job_set.retry_all() if action == "retry_all" else job_set.kill_all())


# -- reading and showing ----------------------------------------------------------------


def _show_queues(app: App, as_json: bool) -> None:
    infos = _run(app, lambda insp: insp.queues.infos())
    if as_json:
        emit_json({"queues": [dataclasses.asdict(q) for q in infos]})
    else:
        show(tables.queue_table(infos))


def _show_queue_page(app: App, name: str, number: int, size: int, as_json: bool) -> None:
    page = _run(app, lambda insp: insp.queue(name).page(number, size))
    if as_json:
        emit_json(_page_json(page, queue=name))
    else:
        show(tables.queue_page(name, page))


def _page_json(page: Page[JobRecord], **head: str) -> dict[str, Any]:
    return {**head, "page": page.number, "size": page.size, "total": page.total,
            "pages": page.pages, "items": [r.as_dict() for r in page.items]}


def _show_set(app: App, which: str, number: int, size: int, search: str | None,
              as_json: bool) -> None:
    if search is not None:
        found = _run(app, lambda insp: insp.job_set(which).search(search))
        if as_json:
            emit_json({"set": which, "search": search, "complete": found.complete,
                       "items": [r.as_dict() for r in found.items]})
            return
        more = "" if found.complete else " (the search stopped early: there may be more)"
        title = f"{which}: {len(found.items)} matching {search!r}{more}"
        show(tables.set_table(which, found.items, title, time.time()))
        return
    page = _run(app, lambda insp: insp.job_set(which).page(number, size))
    if as_json:
        emit_json(_page_json(page, set=which))
    else:
        show(tables.set_table(which, page.items, tables.set_title(which, page), time.time()))


def _show_processes(app: App, as_json: bool) -> None:
    async def read(insp: Inspector) -> Any:
        return (await insp.processes.all(), await insp.processes.recoveries(),
                await insp.processes.burials())

    found, recoveries, burials = _run(app, read)
    if as_json:
        emit_json({"processes": [p.as_dict() for p in found], "recoveries": recoveries,
                   "burials": [r.as_dict() for r in burials]})
    else:
        show(tables.processes(found, recoveries, burials, time.time()))
