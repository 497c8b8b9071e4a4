"""What a person meets first at the command line: ``--version``, help that reads as
text, and a misspelled queue that is said to be one instead of read as an empty queue."""

from __future__ import annotations

import logging

import pytest
import typer.main
from typer.testing import CliRunner

from cogworker_async import App, __version__
from cogworker_async.cli import EXIT_USAGE, cli
from tests.cli import adminapp
from tests.cli.conftest import in_loop, invoke, invoke_json
from tests.cli.test_admin_cli import doomed

COMMANDS = sorted(typer.main.get_command(cli).commands)  # type: ignore[attr-defined]


def test_version_is_an_option_and_a_command() -> None:
    for argv in (["--version"], ["version"]):
        result = CliRunner().invoke(cli, argv)
        assert (result.exit_code, result.stdout.strip()) == (0, __version__)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_commands_help_is_plain_text(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "``" not in result.stdout  # reStructuredText markup, shown literally
    assert "<bool>" not in result.stdout  # a flag that looks as if it took a value
    usage = next(line for line in result.stdout.splitlines() if "Usage:" in line)
    assert "{" not in usage  # typer's mark of a required argument, read as literal braces


@pytest.mark.parametrize("command", ["run", "stats", "queues", "job"])
def test_the_usage_line_names_the_app_argument_app(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--help"], env={"COLUMNS": "200"})
    usage = next(line for line in result.stdout.splitlines() if "Usage:" in line)
    assert f"{command} [OPTIONS] APP" in usage


def test_an_unknown_queue_is_an_error_that_names_the_queues_there_are(
    jobs: adminapp.Jobs,
) -> None:
    in_loop(jobs, lambda: jobs.ok.options(queue="low").enqueue("x"))

    typo = invoke("queues", "lwo")
    cleared = invoke("queues", "lwo", "--clear", "--yes")
    known_but_empty = invoke("queues", "default")

    for result in (typo, cleared):
        assert result.exit_code == EXIT_USAGE
        assert "no queue 'lwo'" in result.stderr
        assert "low" in result.stderr
    assert known_but_empty.exit_code == 0, known_but_empty.output


async def test_a_worker_warns_of_a_queue_nobody_uses_and_serves_it(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture,
) -> None:
    app = App(redis_url, namespace=namespace)

    @app.job(queue="emails")
    async def send() -> None: ...

    caplog.set_level(logging.WARNING, logger="cogworker_async")
    try:
        async with app.worker(queues=("emails", "emials")):
            pass
    finally:
        await app.close()

    warned = [r.getMessage() for r in caplog.records if "a typo?" in r.getMessage()]
    assert len(warned) == 1
    assert "'emials'" in warned[0]


def test_a_dead_job_is_retried_by_its_jid_and_an_unknown_jid_changes_nothing(
    jobs: adminapp.Jobs,
) -> None:
    newest, oldest = doomed(jobs, 2)

    missing = invoke("dead", "--retry", oldest["jid"], "--retry", "f" * 24)
    assert missing.exit_code == 1
    assert "no entry of dead holds jid" in missing.stderr
    assert {item["jid"] for item in invoke_json("dead")["items"]} == {newest["jid"],
                                                                      oldest["jid"]}

    retried = invoke("dead", "--retry", oldest["jid"])
    assert retried.exit_code == 0, retried.output
    assert [item["jid"] for item in invoke_json("dead")["items"]] == [newest["jid"]]
    [queued] = invoke_json("queues", "default")["items"]
    assert queued["jid"] == oldest["jid"]
