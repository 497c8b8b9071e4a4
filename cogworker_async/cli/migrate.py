"""``cogworker-async migrate-keys``: the one-off move of an App's keys from the first key
layout (before hash-tagged keys; ``admin/migrate.py``), with the admin commands'
conventions (``cli/common.py``): errors at one boundary, ``--json`` for a script, and its
exit codes — 0 done; 1 refused (a worker of the first layout looks alive) or some old key
left in place; 2 bad usage; 3 Redis out of reach.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cogworker_async.admin.api import Inspector
from cogworker_async.admin.migrate import MigrationReport, OldWorkersAlive, migrate

# The admin CLI imports this module as it loads (to register the command), so its names
# are read when the command runs: annotations are strings, resolved by typer later.
from cogworker_async.cli import common

OldNamespace = Annotated[str | None, typer.Option(
    help="The namespace the first key layout used (default: the App's). It may hold "
         "braces, as was advised for Redis Cluster then: --old-namespace '{cogworker}'.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Count what would move; change nothing.")]
Force = Annotated[bool, typer.Option(
    "--force", help="Migrate although a worker of the first key layout marks itself alive "
                    "(it is gone).")]

SHOWN: tuple[tuple[str, str], ...] = (
    ("queued", "jobs waiting on queues"),
    ("requeued", "jobs in progress when the old workers stopped (they run again)"),
    ("staged", "jobs an interrupted run had staged"),
    ("scheduled", "scheduled jobs"),
    ("retries", "jobs waiting for a retry"),
    ("dead", "dead jobs"),
    ("repeat_orphans", "repeat orphans (to be filed in dead)"),
    ("unsettled", "unsettled failures (to be filed)"),
    ("processed", "processed (total)"),
    ("failed", "failed (total)"),
    ("days", "per-day counters"),
    ("cron_claims", "periodic claims"),
    ("unique_locks", "unique locks"),
    ("unique_dropped", "unique locks dropped (their job waits nowhere)"),
    ("deleted", "bookkeeping keys of the first layout deleted"),
)


def register(cli: typer.Typer, load_app: common.LoadApp) -> None:
    cli.command(name="migrate-keys")(_command(load_app))


def _command(load_app: common.LoadApp) -> Any:
    def migrate_keys(
        target: common.Target, old_namespace: OldNamespace = None,
        dry_run: DryRun = False, force: Force = False,
        redis_url: common.RedisUrl = None, as_json: common.AsJson = False,
    ) -> None:
        """Move the App's keys from the first key layout (before hash-tagged keys) to the
        current one, once, after every worker of an earlier build stopped (safe to run
        again: it finishes what an interrupted run left)."""
        if old_namespace is not None and not old_namespace:
            common.fail("--old-namespace must not be empty")
        app = common.open_app(load_app, target, redis_url)
        periodic_queues = {name: app.registry[name].options.queue
                           for name in app.periodics if name in app.registry}

        async def work(insp: Inspector) -> MigrationReport | OldWorkersAlive:
            try:
                return await migrate(
                    insp.app._store(), old_namespace or app.settings.namespace,
                    default_queue=insp.default_queue, periodic_queues=periodic_queues,
                    dry_run=dry_run, force=force)
            except OldWorkersAlive as exc:  # refused: not bad usage (exit 1, not 2)
                return exc

        result = common.run_in_loop(app, work)
        if isinstance(result, OldWorkersAlive):
            common.fail(str(result), common.EXIT_PARTIAL)
        _print(result, as_json)
        if result.skipped:
            raise typer.Exit(common.EXIT_PARTIAL)

    return migrate_keys


def _print(report: MigrationReport, as_json: bool) -> None:
    if as_json:
        common.emit_json(report.as_dict())
        return
    done = "would move (dry run: nothing changed)" if report.dry_run else "moved"
    typer.echo(f"first-layout keys of {report.old_namespace!r} -> {report.namespace!r}: {done}")
    for name, label in SHOWN:
        value = getattr(report, name)
        if isinstance(value, dict):
            total = sum(value.values())
            per_queue = ", ".join(f"{q}: {n}" for q, n in sorted(value.items()))
            typer.echo(f"  {label}: {total}" + (f" ({per_queue})" if per_queue else ""))
        else:
            typer.echo(f"  {label}: {value}")
    if report.alive:
        why = "the migration refuses until they stop" if report.dry_run else "--force"
        typer.echo(f"warning: worker(s) of the first layout marked alive ({why}): "
                   f"{', '.join(report.alive)}", err=True)
    for reason in report.skipped:
        typer.echo(f"left in place: {reason}", err=True)
    if report.unknown_count:
        typer.echo(f"{report.unknown_count} key(s) under {report.old_namespace!r} are not "
                   f"the first layout's and were left alone: {', '.join(report.unknown)}", err=True)
