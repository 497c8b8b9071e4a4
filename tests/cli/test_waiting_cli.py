"""Jobs waiting for their parents (``options(after=[...])``) on the command line:
``queues`` and ``stats`` count them per queue (a table and ``--json``), and ``job JID``
says ``waiting``, each parent pending or ended, whose result it takes and what it does
should a parent fail. Real enqueues on the session's Redis; no worker needed (the
parents are scheduled an hour ahead)."""

from __future__ import annotations

import re
from typing import Final

import pytest

from tests.cli import adminapp
from tests.cli.conftest import in_loop, invoke, invoke_json
from tests.cli.test_job_cli import table_rows

pytestmark = pytest.mark.timeout(60)

LATER: Final = 3600.0


def waiting_on(jobs: adminapp.Jobs, count: int, queue: str = "low") -> tuple[str, list[str]]:
    """A parent scheduled an hour ahead, and ``count`` jobs of ``queue`` waiting for it."""
    async def enqueue() -> tuple[str, list[str]]:
        parent = await jobs.ok.enqueue_in(LATER, "parent")
        assert parent is not None
        children = []
        for n in range(count):
            child = await jobs.ok.options(after=[parent], queue=queue).enqueue(f"c{n}")
            assert child is not None
            children.append(child)
        return parent, children

    return in_loop(jobs, enqueue)


def test_queues_and_stats_count_the_jobs_waiting_for_parents(jobs: adminapp.Jobs) -> None:
    waiting_on(jobs, 2)
    in_loop(jobs, lambda: jobs.ok.enqueue("queued"))

    listed = invoke("queues")
    assert listed.exit_code == 0, listed.output
    assert "waiting for parents" in listed.stdout  # the column's header
    # low: none on its list, two waiting; default: one queued, none waiting (and no
    # worker: unserved; jobs waiting for their parents do not make low so)
    assert re.search(r"│ low\s+│\s+0 │\s+\S+ │ running\s+│\s+2 │", listed.stdout), listed.stdout
    assert re.search(r"│ default\s+│\s+1 │\s+\S+ │ unserved\s+│\s+0 │",
                     listed.stdout), listed.stdout
    found = {q["name"]: q for q in invoke_json("queues")["queues"]}
    assert (found["low"]["size"], found["low"]["waiting_for_parents"]) == (0, 2)
    assert found["default"]["waiting_for_parents"] == 0

    summary = invoke_json("stats")
    assert summary["waiting_for_parents"] == 2
    assert {q["name"]: q["waiting_for_parents"] for q in summary["queues"]}["low"] == 2
    shown = invoke("stats")
    assert re.search(r"^\s*waiting for parents\s+2\s*$", shown.stdout, re.M), shown.stdout
    assert re.search(r"│ low\s+│\s+0 │\s+\S+ │ running\s+│\s+2 │", shown.stdout), shown.stdout


def test_job_shows_a_waiting_job_and_its_parents(jobs: adminapp.Jobs) -> None:
    async def enqueue() -> tuple[str, str, str]:
        later = await jobs.ok.options(queue="low").enqueue_in(LATER, "later")
        soon = await jobs.ok.enqueue_in(LATER, "soon")
        assert later is not None
        assert soon is not None
        child = await jobs.ok.options(after=[later, soon], on_parent_failure="dead").enqueue(
            "child")
        assert child is not None
        return later, soon, child

    later, soon, child = in_loop(jobs, enqueue)
    shown = invoke("job", child)
    assert shown.exit_code == 0, shown.output
    rows = table_rows(shown.stdout)
    assert rows["state"] == "waiting"
    assert rows["waits for (2 of 2 not ended)"] == f"low/{later} (pending)"
    assert f"default/{soon} (pending)" in shown.stdout  # the second parent, a line down
    assert rows["if a parent fails"].startswith("dead: it is filed in dead")

    found = invoke_json("job", child)
    assert found["state"] == "waiting"
    assert found["waiting_for"]["parents"] == [
        {"queue": "low", "jid": later, "pending": True},
        {"queue": "default", "jid": soon, "pending": True}]
    assert (found["waiting_for"]["pending"], found["waiting_for"]["on_parent_failure"],
            found["waiting_for"]["takes_result_of"]) == (2, "dead", None)
    assert "waiting_for" not in invoke_json("job", later)  # a scheduled job waits for none

    cancelled = invoke_json("job", child, "--cancel")
    assert (cancelled["cancel"], cancelled["state"]) == ("cancelled", "cancelled")
    assert "waiting_for" not in cancelled


def test_job_says_whose_result_a_waiting_job_takes(jobs: adminapp.Jobs) -> None:
    async def enqueue() -> tuple[str, str]:
        parent = await jobs.ok.enqueue_in(LATER, "parent")
        assert parent is not None
        child = await jobs.ok.options(after=[parent], pass_result=True).enqueue()
        assert child is not None
        return parent, child

    parent, child = in_loop(jobs, enqueue)
    rows = table_rows(invoke("job", child).stdout)
    assert rows["takes the result of"] == f"default/{parent}"
    assert rows["if a parent fails"].startswith("cancel: it is cancelled")
    found = invoke_json("job", child)["waiting_for"]
    assert found["takes_result_of"] == {"queue": "default", "jid": parent, "pending": True}
