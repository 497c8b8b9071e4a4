"""``cogworker-async job app:jobs JID``: one job's status for a person (a table) and for a
script (``--json``), through a real worker — queued, running with its progress,
succeeded with its result, dead with its error; ``--cancel`` and what it did (the job
then never runs); an unknown jid's own exit code."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
import pytest

from cogworker_async import current_job
from cogworker_async.admin import Inspector
from cogworker_async.cli.job import EXIT_UNKNOWN
from cogworker_async.enqueue.handles import JobFunction
from tests.cli import adminapp
from tests.cli.conftest import THREAD_JOIN, eventually, in_loop, invoke, invoke_json, work_until

pytestmark = pytest.mark.timeout(60)

EXIT_USAGE: Final = 2
HOLD_LIMIT: Final = 30.0
"""Seconds ``working`` waits to be let go at most (a test that forgets fails, not hangs)."""

let_go = threading.Event()
"""Set to let a running ``working`` job end (its worker runs in this process)."""


@dataclass(frozen=True)
class Mine:
    """The admin app's jobs, and two of these tests' own (the CLI's copy of the App need
    not know them: a jid is looked up without the registry)."""

    jobs: adminapp.Jobs
    answer: JobFunction[[int], Awaitable[dict[str, Any]]]
    working: JobFunction[[str], Awaitable[None]]


def build(namespace: str, redis_url: str) -> Mine:
    jobs = adminapp.build(namespace, redis_url)

    async def answer(n: int) -> dict[str, Any]:
        return {"answer": n, "text": "null"}

    async def working(step: str) -> None:
        await current_job().set_progress(0.25, step)
        with anyio.fail_after(HOLD_LIMIT):
            while not let_go.is_set():
                await anyio.sleep(0.01)

    return Mine(jobs, answer=jobs.app.job(name="cli.answer", keep_result=60)(answer),
                working=jobs.app.job(name="cli.working")(working))


@pytest.fixture
def mine(jobs: adminapp.Jobs) -> Mine:
    return build(jobs.app.settings.namespace, jobs.app.redis_url())


@contextmanager
def worker_thread(mine: Mine) -> Iterator[None]:
    """A worker of these tests' jobs in a thread (its own loop) while the CLI runs."""
    stop = threading.Event()
    worker = build(mine.jobs.app.settings.namespace, mine.jobs.app.redis_url())

    async def serve() -> None:
        try:
            async with worker.jobs.app.worker():
                while not stop.is_set():
                    await anyio.sleep(0.01)
        finally:
            await worker.jobs.app.close()

    thread = threading.Thread(target=anyio.run, args=(serve,), name="job-cli-worker")
    thread.start()
    try:
        yield
    finally:
        let_go.set()
        stop.set()
        thread.join(THREAD_JOIN)
        let_go.clear()
        assert not thread.is_alive(), "the worker thread did not stop"


def state_is(jid: str, state: str) -> Callable[[Inspector], Awaitable[bool]]:
    async def reached(insp: Inspector) -> bool:
        return (await insp.jobs.status(jid)).state == state
    return reached


def table_rows(stdout: str) -> dict[str, str]:
    """The status table's rows, field -> value (first line of each)."""
    rows = {}
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) == 2 and cells[0] and cells[0] not in rows:
            rows[cells[0]] = cells[1]
    return rows


def enqueue(mine: Mine, make: Callable[[], Awaitable[str | None]]) -> str:
    jid = in_loop(mine.jobs, make)
    assert jid is not None
    return jid


def test_a_queued_job_as_a_table_and_as_json(mine: Mine) -> None:
    jid = enqueue(mine, lambda: mine.jobs.ok.enqueue("waiting"))
    shown = invoke("job", jid)
    assert shown.exit_code == 0, shown.output
    assert f"job {jid}" in shown.stdout
    rows = table_rows(shown.stdout)
    assert {field: rows[field] for field in ("state", "job", "queue", "attempt")} == {
        "state": "queued", "job": "ok", "queue": "default", "attempt": "1"}
    assert rows["enqueued"].endswith("ago")
    found = invoke_json("job", jid)
    assert found["jid"] == jid
    assert found["state"] == "queued"
    assert found["name"] == "ok"
    assert found["queue"] == "default"
    assert found["enqueued_at"] > 0
    assert found["started_at"] is None
    assert "cancel" not in found


def test_a_running_job_shows_its_progress_and_process(mine: Mine) -> None:
    with worker_thread(mine):
        jid = enqueue(mine, lambda: mine.working.enqueue("step two of eight"))
        eventually(lambda: invoke_json("job", jid)["progress"] == 0.25)
        found = invoke_json("job", jid)
        assert found["state"] == "running"
        assert found["info"] == "step two of eight"
        assert found["process"]
        shown = invoke("job", jid)
        assert shown.exit_code == 0, shown.output
        assert table_rows(shown.stdout)["progress"].endswith("] 25%")
        assert "step two of eight" in shown.stdout
        assert found["process"] in shown.stdout


def test_a_succeeded_job_shows_its_result(mine: Mine) -> None:
    jid = enqueue(mine, lambda: mine.answer.enqueue(42))
    with worker_thread(mine):
        eventually(lambda: invoke_json("job", jid)["state"] == "succeeded")
    found = invoke_json("job", jid)
    assert found["has_result"] is True
    assert found["result"] == {"answer": 42, "text": "null"}
    assert found["finished_at"] >= found["started_at"]
    shown = invoke("job", jid)
    assert '"answer": 42' in shown.stdout
    assert "ran for" in shown.stdout


def test_a_dead_job_shows_its_error(mine: Mine) -> None:
    jid = enqueue(mine, lambda: mine.jobs.doomed.enqueue("for good"))
    work_until(mine.jobs, state_is(jid, "dead"))
    found = invoke_json("job", jid)
    assert found["state"] == "dead"
    assert found["error"] == "ValueError: doomed for good"
    shown = invoke("job", jid)
    assert shown.exit_code == 0, shown.output
    assert "ValueError: doomed for good" in shown.stdout


def test_cancel_a_queued_job_and_it_never_runs(mine: Mine) -> None:
    jid = enqueue(mine, lambda: mine.answer.enqueue(1))
    shown = invoke("job", jid, "--cancel")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith("cancelled: the job will not run\n")
    assert "cancelled" in shown.stdout.split("\n", 1)[1]

    other = enqueue(mine, lambda: mine.answer.enqueue(2))
    found = invoke_json("job", other, "--cancel")
    assert (found["cancel"], found["state"]) == ("cancelled", "cancelled")

    after = enqueue(mine, lambda: mine.answer.enqueue(3))
    work_until(mine.jobs, state_is(after, "succeeded"))
    for cancelled in (jid, other):
        found = invoke_json("job", cancelled)
        assert found["state"] == "cancelled"
        assert found["started_at"] is None  # never ran
        assert found["has_result"] is False


def test_cancel_a_running_job_stops_it(mine: Mine) -> None:
    with worker_thread(mine):
        jid = enqueue(mine, lambda: mine.working.enqueue("long"))
        eventually(lambda: invoke_json("job", jid)["state"] == "running")
        found = invoke_json("job", jid, "--cancel")
        assert found["cancel"] == "stopping"
        assert found["cancel_requested"] is True
        eventually(lambda: invoke_json("job", jid)["state"] == "cancelled")
    found = invoke_json("job", jid)
    assert found["finished_at"] >= found["started_at"]


def test_an_unknown_jid_has_its_own_exit_code(mine: Mine) -> None:
    shown = invoke("job", "no-such-job")
    assert shown.exit_code == EXIT_UNKNOWN, shown.output
    assert "job no-such-job: unknown" in shown.stdout
    as_json = invoke("job", "no-such-job", "--json")
    assert as_json.exit_code == EXIT_UNKNOWN
    assert '"state": "unknown"' in as_json.stdout
    cancelled = invoke("job", "no-such-job", "--cancel")
    assert cancelled.exit_code == EXIT_UNKNOWN
    assert "nothing done: no job with this jid is known" in cancelled.stdout


def test_text_that_cannot_be_a_jid_is_usage(mine: Mine) -> None:
    shown = invoke("job", 'a"b')
    assert shown.exit_code == EXIT_USAGE
    assert "error: a jid must be printable text without quotes" in shown.stderr
