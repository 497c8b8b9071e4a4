"""``queues`` and ``stats`` name a queue that holds jobs no live process serves —
state "unserved", a one-line legend under the table, ``"unserved": true`` in ``--json``
— and only such a queue (issue 45, item 2)."""

from __future__ import annotations

import re

from cogworker_async.admin import Inspector
from cogworker_async.admin.serving import UNSERVED_HINT
from tests.cli import adminapp
from tests.cli.conftest import eventually, in_loop, invoke, invoke_json, worker_thread

LEGEND = f"unserved: {UNSERVED_HINT}"


def row(state: str, name: str = "default", size: int = 1) -> re.Pattern[str]:
    return re.compile(rf"│ {name}\s+│\s+{size} │\s+\S+ │ {state}\s+│")


def test_a_job_no_worker_serves_marks_its_queue_in_both_tables_and_json(
        jobs: adminapp.Jobs) -> None:
    in_loop(jobs, lambda: jobs.ok.enqueue("waits"))
    for command in ("queues", "stats"):
        shown = invoke(command)
        assert shown.exit_code == 0, shown.output
        assert row("unserved").search(shown.stdout), shown.stdout
        assert LEGEND in shown.stdout, shown.stdout
    assert [(q["name"], q["unserved"], q["state"])
            for q in invoke_json("queues")["queues"]] == [("default", True, "unserved")]
    assert [(q["name"], q["unserved"], q["state"])
            for q in invoke_json("stats")["queues"]] == [("default", True, "unserved")]


def test_an_empty_queue_nobody_serves_is_not_marked(jobs: adminapp.Jobs) -> None:
    for command in ("queues", "stats"):
        shown = invoke(command)
        assert row("running", size=0).search(shown.stdout), shown.stdout
        assert "unserved" not in shown.stdout
    assert [q["unserved"] for q in invoke_json("queues")["queues"]] == [False]


def test_a_queue_a_live_worker_serves_is_not_marked_while_it_holds_jobs(
        jobs: adminapp.Jobs) -> None:
    # One more than the worker's slots: every slot busy, one job left on the queue.
    count = jobs.app.settings.concurrency + 1

    async def enqueue() -> None:
        for _ in range(count):
            await jobs.hold.enqueue()

    in_loop(jobs, enqueue)
    with worker_thread(jobs):
        eventually(lambda: in_loop(jobs, lambda: _served_with_one_left(jobs)))
        for command in ("queues", "stats"):
            shown = invoke(command)
            assert row("running").search(shown.stdout), shown.stdout
            assert "unserved" not in shown.stdout
        assert [(q["size"], q["unserved"])
                for q in invoke_json("queues")["queues"]] == [(1, False)]


async def _served_with_one_left(jobs: adminapp.Jobs) -> bool:
    insp = Inspector(jobs.app)
    alive = any(p.alive for p in await insp.processes.all())
    return alive and (await insp.queue("default").info()).size == 1
