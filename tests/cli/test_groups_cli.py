"""Priorities and fair groups on the command line: ``queues`` and ``stats`` show each
queue's jobs waiting per priority (outside its groups) and how many groups have jobs
waiting, in a table and in ``--json``. Real enqueues on the session's Redis; no worker
(nothing is to run)."""

from __future__ import annotations

import re
from typing import Final

import pytest

from tests.cli import adminapp
from tests.cli.conftest import in_loop, invoke, invoke_json

pytestmark = pytest.mark.timeout(60)

# default: 3 of acme, 1 of zeta, 1 plain, 1 of priority 5 (6 in all; 2 outside groups,
# by priority 5:1 0:1; 2 groups); low: 1 plain (no priority to tell apart, no group).
# No worker runs: both hold jobs no live process serves.
DEFAULT_ROW: Final = re.compile(r"│ default\s+│\s+6 │\s+\S+ │ unserved\s+│\s+0 │ 5:1 0:1\s+│\s+2 │")
LOW_ROW: Final = re.compile(r"│ low\s+│\s+1 │\s+\S+ │ unserved\s+│\s+0 │\s+│\s+│")


def enqueue_grouped(jobs: adminapp.Jobs) -> None:
    async def enqueue() -> None:
        for n in range(3):
            await jobs.ok.options(group="acme").enqueue(f"acme{n}")
        # In a group: counted in its group's jobs, not by priority.
        await jobs.ok.options(group="zeta", priority=5).enqueue("zeta")
        await jobs.ok.enqueue("plain")
        await jobs.ok.options(priority=5).enqueue("urgent")
        await jobs.ok.options(queue="low").enqueue("low")

    in_loop(jobs, enqueue)


def test_queues_and_stats_show_the_priorities_and_the_groups_waiting(
        jobs: adminapp.Jobs) -> None:
    enqueue_grouped(jobs)

    listed = invoke("queues")
    assert listed.exit_code == 0, listed.output
    header = listed.stdout.split("\n")[2]  # under the title and the box's top
    assert re.search(r"┃ by priority ┃ groups ┃\s*$", header), listed.stdout  # last
    assert DEFAULT_ROW.search(listed.stdout), listed.stdout
    assert LOW_ROW.search(listed.stdout), listed.stdout

    # JSON keys are strings: a priority's level reads "5", not 5.
    found = {q["name"]: q for q in invoke_json("queues")["queues"]}
    assert (found["default"]["by_group"], found["default"]["by_priority"]) == (
        {"acme": 3, "zeta": 1}, {"5": 1, "0": 1})
    assert (found["low"]["by_group"], found["low"]["by_priority"]) == ({}, {"0": 1})

    shown = invoke("stats")
    assert shown.exit_code == 0, shown.output
    assert DEFAULT_ROW.search(shown.stdout), shown.stdout  # rebuilt from the summary
    assert LOW_ROW.search(shown.stdout), shown.stdout
    summary = {q["name"]: q for q in invoke_json("stats")["queues"]}
    assert summary["default"]["by_group"] == {"acme": 3, "zeta": 1}
