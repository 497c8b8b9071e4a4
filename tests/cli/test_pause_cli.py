"""``queues NAME --pause / --resume``: the state lives in Redis, shows in the queue table
and the JSON (tests/worker/e2e/test_flow_control.py shows workers obeying it)."""

from __future__ import annotations

import re

from tests.cli import adminapp
from tests.cli.conftest import in_loop, invoke, invoke_json


def test_pause_shows_in_the_table_and_resume_clears_it(jobs: adminapp.Jobs) -> None:
    async def enqueue() -> None:
        await jobs.ok.enqueue("held")

    in_loop(jobs, enqueue)
    paused = invoke("queues", "default", "--pause")
    assert paused.exit_code == 0, paused.output
    assert paused.stdout.strip() == "queue default: paused"
    again = invoke("queues", "default", "--pause")
    assert again.stdout.strip() == "queue default: paused (it already was)"

    listed = invoke("queues")
    assert re.search(r"│ default\s+│\s+1 │[^│]+│ paused\s+│", listed.stdout), listed.stdout
    info = {q["name"]: q for q in invoke_json("queues")["queues"]}["default"]
    assert info["paused_since"] is not None

    resumed = invoke_json("queues", "default", "--resume")
    assert resumed == {"action": "resume", "queue": "default", "changed": True,
                       "state": "running"}
    info = {q["name"]: q for q in invoke_json("queues")["queues"]}["default"]
    assert info["paused_since"] is None


def test_pause_needs_a_queue_and_one_action_at_a_time(jobs: adminapp.Jobs) -> None:
    assert invoke("queues", "--pause").exit_code == 2
    both = invoke("queues", "default", "--pause", "--resume")
    assert both.exit_code == 2
    assert "one action at a time" in both.output
    assert invoke("queues", "no spaces", "--pause").exit_code == 2


def test_pausing_a_queue_nobody_uses_asks_first(jobs: adminapp.Jobs) -> None:
    # A pause has no TTL: a typo's ("defualt") would stay in Redis for good.
    typo = invoke("queues", "defualt", "--pause")
    assert typo.exit_code != 0
    assert "no job was ever enqueued on it (a typo?)" in typo.output
    assert "nothing done" in typo.output
    assert {q["name"]: q for q in invoke_json("queues")["queues"]}.get("defualt") is None
    # Asked for on purpose (a queue whose jobs are yet to come): --yes.
    meant = invoke("queues", "later", "--pause", "--yes")
    assert meant.exit_code == 0, meant.output
    assert meant.stdout.strip() == "queue later: paused"
