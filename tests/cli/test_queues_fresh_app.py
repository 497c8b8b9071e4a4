"""``queues`` on a fresh App lists the App's queues, empty as they are, as ``stats`` and
the dashboard do; and both tables name each queue's state as the dashboard does
("running", or "paused") — never a blank cell (issue 45, item 5)."""

from __future__ import annotations

import re

from tests.cli import adminapp
from tests.cli.conftest import in_loop, invoke, invoke_json


def test_queues_on_a_fresh_app_lists_its_queues_running(jobs: adminapp.Jobs) -> None:
    listed = invoke("queues")
    assert listed.exit_code == 0, listed.output
    assert "no queues hold jobs" not in listed.stdout
    assert re.search(r"│ default\s+│\s+0 │\s+\S+ │ running\s+│", listed.stdout), listed.stdout

    queues = invoke_json("queues")["queues"]
    assert [(q["name"], q["state"]) for q in queues] == [("default", "running")]
    assert [q["name"] for q in invoke_json("stats")["queues"]] == ["default"]


def test_both_tables_show_running_and_paused(jobs: adminapp.Jobs) -> None:
    async def enqueue_and_pause() -> None:
        await jobs.ok.options(queue="low").enqueue("x")
        await jobs.app.queues.pause("low")

    in_loop(jobs, enqueue_and_pause)
    for command in ("queues", "stats"):
        shown = invoke(command)
        assert shown.exit_code == 0, shown.output
        assert re.search(r"│ default\s+│\s+0 │\s+\S+ │ running\s+│", shown.stdout), shown.stdout
        assert re.search(r"│ low\s+│\s+1 │\s+\S+ │ paused\s+│", shown.stdout), shown.stdout
