"""A co-tenant's garbage in every key the project reads (tests/admin/cotenant.py), as the
readers see it: whatever is planted, every dashboard page answers (never a 500) and every
CLI command exits 0 (issue 25, items 8-11). tests/admin/test_cotenant_fuzz.py holds the
other side: a worker, ``run --burst`` and the workflows go on beside the same garbage.

Sizes: ``make test`` plants every key with another type and with a few values that broke
readers; ``COGWORKER_CHAOS=full`` (``make chaos``) plants every value in every key and
runs every command on each; ``make test-fast`` (``HYPOTHESIS_PROFILE=quick``) checks every
fifth planting of ``make test``'s (``tests.hypothesis_profiles.share``).
Each check walks its table and reports every planting that failed, not the first.

The commands run in this process through the CLI's own click command (what
``cogworker-async`` runs), built once: typer builds every command's parameters again for
each ``CliRunner.invoke`` (~15 ms, a thousand times here); nothing here is about the
process (tests/cli/test_errors.py and the supervisor's tests hold exit codes of real ones).
"""

from __future__ import annotations

import sys
import traceback
from typing import Final

import anyio
import click
import httpx
import pytest
import typer.main
from typer.testing import CliRunner

from cogworker_async.cli import cli
from cogworker_async.redis.store import Store
from cogworker_async.web import create_dashboard
from tests.admin.cotenant import (
    BID,
    FULL,
    JID,
    PLANTINGS,
    QUEUE,
    WORKFLOW_LABELS,
    Planting,
    fresh,
    jobs_on_namespace,
    plant,
    report,
    served_jobs,
)
from tests.cli import adminapp
from tests.hypothesis_profiles import share

pytestmark = [pytest.mark.timeout(1800 if FULL else 120),
              *([pytest.mark.chaos] if FULL else [])]

PAGES: Final = ("/", "/stats.json", "/queues", f"/queues/{QUEUE}", "/busy", "/scheduled",
                "/retries", "/dead", "/periodic", "/limits", "/jobs?jid=" + JID,
                f"/jobs/{JID}", "/metrics/jobs", "/metrics/jobs/ok", "/metrics", "/batches",
                f"/batches/{BID}", f"/queues/{QUEUE}/waiting")
COMMANDS: Final = (("stats",), ("queues",), ("queues", QUEUE), ("scheduled",), ("retries",),
                   ("dead",), ("processes",), ("periodic",), ("limits",),
                   ("metrics-summary",), ("metrics-summary", "--job", "ok"),
                   ("job", JID), ("stats", "--json"), ("processes", "--json"),
                   ("limits", "--json"), ("metrics-summary", "--json"), ("batch", BID),
                   ("batch", BID, "--json"))
BATCH_EXITS: Final = frozenset({0, 1, 4})
"""``batch``'s answers: found, damaged (one line, exit 1), unknown (4)."""
UNKNOWN_EXIT: Final = 4
"""``job``'s exit status for a jid without a status record."""
PROG: Final = "cogworker-async"

jobs = pytest.fixture(name="jobs")(jobs_on_namespace)
served = pytest.fixture(name="served")(served_jobs)


async def test_every_page_answers_whatever_a_key_holds(served: adminapp.Jobs,
                                                       store: Store) -> None:
    failures, jobs = [], served
    cases = share(PLANTINGS)
    transport = httpx.ASGITransport(app=create_dashboard(jobs.app))
    async with httpx.AsyncClient(transport=transport, base_url="http://board.test") as http:
        for planting in cases:
            await fresh(store)
            await plant(store, planting)
            for path in PAGES:
                try:
                    response = await http.get(path)
                    status = response.status_code
                except Exception:  # raised out of the app: the 500 a user would get
                    status, response = 500, None
                if status >= 500:
                    shown = response.text if response else traceback.format_exc()
                    failures.append(f"{planting.id}: GET {path} -> {status}\n{shown[-1500:]}")
            try:
                await jobs.app.status(JID)
                await jobs.app.paused()
            except Exception as exc:
                failures.append(f"{planting.id}: status(), paused(): {exc!r}")
    report("cotenant_pages", failures, len(cases))


@pytest.fixture(scope="module")
def command() -> click.Command:
    """The CLI's click command, as ``cogworker-async`` builds it at its start."""
    return typer.main.get_command(cli)


def run(command: click.Command, *args: str) -> tuple[int, str]:
    """``cogworker-async ARGS`` in this process, as ``typer.testing.CliRunner.invoke``
    runs it (its isolation: stdin, stdout, stderr, terminal width): the exit status and
    what a terminal would show. An exception out of the command is status 1, as there."""
    runner = CliRunner()
    with runner.isolation() as (_stdout, _stderr, output):
        try:
            command.main(args=list(args), prog_name=PROG)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (exit_.code is not None)
        except Exception as exc:  # as CliRunner.invoke: status 1, no traceback shown
            sys.stderr.write(f"raised {exc!r}\n")
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return int(code), output.getvalue().decode(runner.charset, "replace")


def test_every_command_exits_0_whatever_a_key_holds(jobs: adminapp.Jobs, command: click.Command,
                                                   redis_url: str, namespace: str) -> None:
    failures = []
    commands = COMMANDS if FULL else COMMANDS[::2]

    async def prepare(planting: Planting) -> None:
        store = Store.from_url(redis_url, namespace)
        try:
            await fresh(store)
            await plant(store, planting)
        finally:
            await store.aclose()

    # Short: the workflow keys (read by the batch command and the stats) with another
    # type only.
    cases = PLANTINGS if FULL else share([p for p in PLANTINGS if p.wrong_type or (
        p.spec.label not in WORKFLOW_LABELS and p.garbage.name in (
            "deep JSON list", "huge integer fields", "infinite fields"))])
    for planting in cases:
        anyio.run(prepare, planting)
        for words in commands:
            code, output = run(command, words[0], adminapp.TARGET, *words[1:])
            if not _answered(words, planting, code, output):
                failures.append(f"{planting.id}: {' '.join(words)} -> {code}\n{output[-1500:]}")
    report("cotenant_commands", failures, len(cases) * len(commands))


def _answered(command: tuple[str, ...], planting: Planting, code: int, output: str) -> bool:
    """Exit 0; or unknown (4) from ``job`` when the registry of queue names, where a
    status is looked for, no longer names the job's queue; or, from ``batch``, damaged
    (one line, 1) or unknown (4) — never a traceback."""
    if command[0] == "batch":
        return code in BATCH_EXITS and "Traceback" not in output
    return code == 0 or (command[0] == "job" and planting.spec.label == "queue names"
                         and code == UNKNOWN_EXIT)
