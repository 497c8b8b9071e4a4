"""The admin CLI: ``stats``, ``queues``, ``scheduled``, ``retries``, ``dead``, ``processes``,
``periodic`` and ``limits`` — what the dashboard shows, as tables for a person or
``--json`` for a script, and its actions (retry, delete, kill on entries named by their
tokens; pause and resume a queue).

Every read and action goes through ``Inspector``, the dashboard's model: an action finds
exactly the entry the user saw, or reports it gone, and never touches another one.
Errors are translated at one boundary, ``common.run_in_loop``: nothing leaves as a traceback.

Exit codes: 0 done; 1 some named entry was gone (it ran, another process moved it) or
was refused; 2 bad usage (a malformed token, a bad page, an unknown App); 3 Redis out of
reach or refusing (a wrong password, a missing permission); with ``error: ...`` on stderr.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Annotated, Any, Final

import typer

from cogworker_async.admin.api import Inspector
from cogworker_async.admin.records import (
    PAGE_SIZE,
    DayTotals,
    Done,
    JobRecord,
    Page,
    QueueInfo,
)
from cogworker_async.admin.sets import JobSet
from cogworker_async.app import App
from cogworker_async.cli import tables
from cogworker_async.cli.common import (
    EXIT_PARTIAL,
    SETS,
    AsJson,
    Clear,
    DeleteAll,
    DeleteTokens,
    KillAll,
    KillTokens,
    LoadApp,
    PageNumber,
    PageSize,
    PauseQueue,
    RedisUrl,
    ResumeQueue,
    RetryAll,
    RetryTokens,
    Search,
    Target,
    Yes,
    check_tokens,
    confirm,
    emit_json,
    fail,
    is_token,
    one_action,
    open_app,
    report,
    run_in_loop,
    show,
)
from cogworker_async.settings import check_queue_name

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

        summary, server, history = run_in_loop(open_app(load_app, target, redis_url), read)
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
        action = one_action(delete=delete, clear=clear, pause=pause, resume=resume)
        if name is None:
            if action:
                fail(f"--{action} needs a queue NAME")
            _show_queues(open_app(load_app, target, redis_url), as_json)
            return
        try:
            queue = check_queue_name(name)
        except ValueError as exc:
            fail(str(exc))
        app = open_app(load_app, target, redis_url)
        if pause or resume:
            _pause_or_resume(app, queue, "pause" if pause else "resume", as_json, yes)
            return
        _known_or_fail(app, queue)
        if delete:
            tokens = check_tokens(delete, position=True)
            done = run_in_loop(app, lambda insp: insp.queue(queue).delete(tokens))
            report("delete", done, as_json)
        elif clear:
            confirm(f"Delete every job on queue {queue!r}?", yes)
            count = run_in_loop(app, lambda insp: insp.queue(queue).clear())
            report("clear", Done(count), as_json)
        else:
            _show_queue_page(app, queue, page, size, as_json)

    return queues


def _known_or_fail(app: App, queue: str) -> None:
    """Exit 2 naming the queues there are, for a queue neither the App nor Redis knows:
    a typo must not read as an empty queue (or a clear that found nothing)."""
    async def known(insp: Inspector) -> tuple[bool, list[str]]:
        registered = await insp.queues.names()
        return (queue in registered or queue in insp.known_queues(),
                sorted(set(registered) | insp.known_queues()))
    found, names = run_in_loop(app, known)
    if not found:
        fail(f"no queue {queue!r}: no job of this App uses it and none was ever enqueued "
             f"on it (queues: {', '.join(names) or 'none'})")


async def _in_use(insp: Inspector, queue: str) -> bool:
    """A queue the App knows (its settings', its jobs') or one Redis has registered."""
    return queue in insp.known_queues() or queue in await insp.queues.names()


def _pause_or_resume(app: App, queue: str, action: str, as_json: bool, yes: bool) -> None:
    """Pause or resume; saying so when it already was (exit 0: the state asked for
    holds either way)."""
    if action == "pause" and not run_in_loop(app, lambda insp: _in_use(insp, queue)):
        # A pause has no TTL: a typo's would sit in Redis for good, doing nothing.
        confirm(f"No worker of this App serves queue {queue!r} and no job was "
                "ever enqueued on it (a typo?): pause it anyway?", yes)
    changed = run_in_loop(app, lambda insp: getattr(insp.queues, action)(queue))
    state = "paused" if action == "pause" else "running"
    if as_json:
        emit_json({"action": action, "queue": queue, "changed": changed, "state": state})
    else:
        typer.echo(f"queue {queue}: {state}" + ("" if changed else " (it already was)"))


def _processes_command(load_app: LoadApp) -> Callable[..., None]:
    def processes(target: Target, redis_url: RedisUrl = None, as_json: AsJson = False,
                  check: CheckAlive = False) -> None:
        """Worker processes (busy, beats, lag, memory), their running jobs, recoveries.
        ``--check``: a health check by exit code (arq's ``--check``)."""
        app = open_app(load_app, target, redis_url)
        if check:
            _check_alive(app)
        _show_processes(app, as_json)

    return processes


CheckAlive = Annotated[bool, typer.Option(
    "--check", help="Print nothing but one line; exit 0 if a worker process of this App "
                    "is alive (it beat within orphan_threshold), 1 if none, 3 if Redis is "
                    "out of reach: for a container's health check (arq --check).")]


def _check_alive(app: App) -> None:
    found = run_in_loop(app, lambda insp: insp.processes.all())
    alive = [process for process in found if process.alive]
    if alive:
        typer.echo(f"ok: {len(alive)} worker process{'es' if len(alive) > 1 else ''} "
                   "alive")
        raise typer.Exit(0)
    typer.echo(f"no worker process of this App is alive ({len(found)} known, none "
               "beating)", err=True)
    raise typer.Exit(EXIT_PARTIAL)


def _periodic_command(load_app: LoadApp) -> Callable[..., None]:
    def periodic(target: Target, redis_url: RedisUrl = None, as_json: AsJson = False) -> None:
        """Periodic jobs: schedule, timezone, next and last run, running now."""
        found = run_in_loop(open_app(load_app, target, redis_url), lambda insp: insp.periodic.all())
        if as_json:
            emit_json({"periodic": [dataclasses.asdict(p) for p in found]})
        else:
            show(tables.periodic(found, time.time()))

    return periodic


def _limits_command(load_app: LoadApp) -> Callable[..., None]:
    def limits(target: Target, redis_url: RedisUrl = None, as_json: AsJson = False) -> None:
        """Rate limiters: kind, what each allows, in use now, recent refusals."""
        found = run_in_loop(open_app(load_app, target, redis_url), lambda insp: insp.limits.all())
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
        action = one_action(**tokens, retry_all=retry_all, delete_all=delete_all,
                             kill_all=kill_all)
        if action is None:
            _show_set(open_app(load_app, target, redis_url), which, page, size, search, as_json)
            return
        if which == "dead" and action.startswith("kill"):
            fail("dead jobs are dead already: --kill is for scheduled and retries")
        named = tokens.get(action)
        if named is not None:
            checked = check_tokens(named, position=False, jids=True)
            done = run_in_loop(open_app(load_app, target, redis_url),
                        lambda insp: _act(insp.job_set(which), action, checked, which))
        else:
            confirm(_BULK_QUESTION[action].format(which=which), yes)
            done = run_in_loop(open_app(load_app, target, redis_url),
                        lambda insp: _act_on_all(insp.job_set(which), action))
        report(action.replace("_", "-"), done, as_json)

    return command


async def _act(job_set: JobSet, action: str, named: list[str], which: str) -> Done:
    tokens = [name if is_token(name, position=False) else await _token_of(job_set, name, which)
              for name in named]  # every jid found before anything is done
    acts = {"retry": job_set.retry, "delete": job_set.delete, "kill": job_set.kill}
    return await acts[action](tokens)


async def _token_of(job_set: JobSet, jid: str, which: str) -> str:
    """The token of the one entry of the set whose job has ``jid`` (a bounded search);
    exit 1 if there is none, 2 if there are several (a token tells them apart)."""
    found = await job_set.search(jid)
    holding = [record for record in found.items if record.jid == jid]
    if len(holding) > 1:
        fail(f"{len(holding)} entries of {which} hold jid {jid!r}: name one by its token")
    if not holding:
        looked = "" if found.complete else " (among the entries a search reads at most)"
        fail(f"no entry of {which} holds jid {jid!r}{looked}", EXIT_PARTIAL)
    return holding[0].token


async def _act_on_all(job_set: JobSet, action: str) -> Done:
    if action == "delete_all":
        return Done(await job_set.delete_all())
    return await (job_set.retry_all() if action == "retry_all" else job_set.kill_all())


# -- reading and showing ----------------------------------------------------------------


async def _listed_queues(insp: Inspector) -> list[QueueInfo]:
    """The queues ``stats`` and the dashboard list: the App's own (declared, its jobs',
    the default), empty or not, and every queue Redis has registered; by name."""
    names, _ = await insp.queues.bounded()
    return await insp.queues.infos(sorted(names))


def _show_queues(app: App, as_json: bool) -> None:
    infos = run_in_loop(app, _listed_queues)
    if as_json:
        emit_json({"queues": [{**dataclasses.asdict(q), "state": q.state} for q in infos]})
    else:
        show(tables.queue_table(infos))


def _show_queue_page(app: App, name: str, number: int, size: int, as_json: bool) -> None:
    page = run_in_loop(app, lambda insp: insp.queue(name).page(number, size))
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
        found = run_in_loop(app, lambda insp: insp.job_set(which).search(search))
        if as_json:
            emit_json({"set": which, "search": search, "complete": found.complete,
                       "items": [r.as_dict() for r in found.items]})
            return
        more = "" if found.complete else " (the search stopped early: there may be more)"
        title = f"{which}: {len(found.items)} matching {search!r}{more}"
        show(tables.set_table(which, found.items, title, time.time()))
        return
    page = run_in_loop(app, lambda insp: insp.job_set(which).page(number, size))
    if as_json:
        emit_json(_page_json(page, set=which))
    else:
        show(tables.set_table(which, page.items, tables.set_title(which, page), time.time()))


def _show_processes(app: App, as_json: bool) -> None:
    async def read(insp: Inspector) -> Any:
        return (await insp.processes.all(), await insp.processes.recoveries(),
                await insp.processes.burials())

    found, recoveries, burials = run_in_loop(app, read)
    if as_json:
        emit_json({"processes": [p.as_dict() for p in found], "recoveries": recoveries,
                   "burials": [r.as_dict() for r in burials]})
    else:
        show(tables.processes(found, recoveries, burials, time.time()))
