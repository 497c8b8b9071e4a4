"""The admin CLI against a real server: what it prints is what is stored, its actions
move exactly the entries named, and it fails with ``error: ...`` and an exit code, never
a traceback."""

from __future__ import annotations

import re
import socket
import time
from typing import Any

from typer.testing import CliRunner

from cogworker_async.cli import cli
from tests.cli import adminapp
from tests.cli.conftest import (
    eventually,
    in_loop,
    invoke,
    invoke_json,
    sizes,
    work_until,
    worker_thread,
)


def fill(jobs: adminapp.Jobs) -> None:
    """3 jobs run fine, 2 fail into retries, 1 into dead; then 4 wait on ``low`` and 1
    is scheduled (after the worker stopped: nobody takes them)."""

    async def enqueue_work() -> None:
        for n in range(3):
            await jobs.ok.enqueue(f"ok{n}")
        for n in range(2):
            await jobs.flaky.enqueue(f"flaky{n}")
        await jobs.doomed.enqueue("doomed0")

    async def enqueue_waiting() -> None:
        for n in range(4):
            await jobs.ok.options(queue="low").enqueue(f"low{n}")
        await jobs.ok.enqueue_in(600, "later")

    in_loop(jobs, enqueue_work)
    work_until(jobs, sizes(retries=2, dead=1))
    in_loop(jobs, enqueue_waiting)


def doomed(jobs: adminapp.Jobs, count: int) -> list[dict[str, Any]]:
    """``count`` jobs in dead (through a worker); returns the dead page, newest first."""

    async def enqueue() -> None:
        for n in range(count):
            await jobs.doomed.enqueue(f"d{n}")

    in_loop(jobs, enqueue)
    work_until(jobs, sizes(dead=count))
    items: list[dict[str, Any]] = invoke_json("dead")["items"]
    return items


def no_traceback(output: str) -> bool:
    return "Traceback" not in output


# -- reading --------------------------------------------------------------------------------


def test_stats_counts_what_the_worker_did_and_what_waits(jobs: adminapp.Jobs) -> None:
    fill(jobs)
    summary = invoke_json("stats")
    assert {key: summary[key] for key in ("processed", "failed", "enqueued", "scheduled",
                                          "retries", "dead", "processes", "busy",
                                          "awaiting_recovery")} == {
        "processed": 6, "failed": 3, "enqueued": 4, "scheduled": 1, "retries": 2,
        "dead": 1, "processes": 0, "busy": 0, "awaiting_recovery": 0}
    assert {q["name"]: q["size"] for q in summary["queues"]}["low"] == 4
    assert summary["server"]["version"] not in ("", "?")

    result = invoke("stats")
    assert result.exit_code == 0, result.output
    for label, value in (("processed", 6), ("failed", 3), ("enqueued", 4), ("retries", 2),
                         ("dead", 1), ("awaiting recovery", 0)):
        assert re.search(rf"^\s*{label}\s+{value}\s*$", result.stdout, re.M), label
    assert re.search(rf"redis\s+\S+ {re.escape(summary['server']['version'])}", result.stdout)
    assert re.search(r"│ low\s+│\s+4 │", result.stdout)


def test_queues_lists_sizes_and_pages_a_queue_in_run_order(jobs: adminapp.Jobs) -> None:
    async def enqueue() -> None:
        await jobs.ok.enqueue_many([((f"n{n}",), {}) for n in range(30)])

    in_loop(jobs, enqueue)
    listed = invoke("queues")
    assert listed.exit_code == 0, listed.output
    assert re.search(r"│ default\s+│\s+30 │", listed.stdout)

    page = invoke_json("queues", "default", "--page", "2", "--size", "10")
    assert (page["total"], page["pages"]) == (30, 3)
    assert [item["position"] for item in page["items"]] == list(range(10, 20))
    assert [item["args"] for item in page["items"]] == [[f"n{n}"] for n in range(10, 20)]

    shown = invoke("queues", "default", "--page", "2", "--size", "10")
    assert "page 2 of 3 (30 in all)" in shown.stdout
    first = page["items"][0]
    assert re.search(rf"│ 10 │ {re.escape(first['token'])}\s+│ ok\s+│ \"n10\"",
                     shown.stdout)


def test_scheduled_retries_and_dead_tables_show_when_and_why(jobs: adminapp.Jobs) -> None:
    fill(jobs)
    retries = invoke("retries")
    assert retries.exit_code == 0, retries.output
    assert len(re.findall(r"│ in 59m\s+│ \S+\s+│ flaky\s+│ \"flaky\d\"\s+│ RuntimeError: flaky",
                          retries.stdout)) == 2, retries.stdout
    dead = invoke("dead")
    assert re.search(r"│ \d+(\.\d)?s ago\s+│ \S+\s+│ doomed\s+│ \"doomed0\"\s+│ "
                     r"ValueError: doomed doomed0", dead.stdout)
    scheduled = invoke("scheduled")
    assert re.search(r"│ in 9m\s+│ \S+\s+│ ok\s+│ \"later\"", scheduled.stdout)
    found = invoke_json("retries", "--search", "FLAKY1")
    assert [item["args"] for item in found["items"]] == [["flaky1"]]


def test_processes_show_a_busy_worker_and_its_running_job(jobs: adminapp.Jobs) -> None:
    with worker_thread(jobs):
        jid = in_loop(jobs, jobs.hold.enqueue)

        def busy() -> bool:
            found = invoke_json("processes")["processes"]
            return len(found) == 1 and found[0]["busy"] == 1

        eventually(busy)
        [process] = invoke_json("processes")["processes"]
        assert process["alive"]
        assert not process["awaiting_recovery"]
        assert [job["jid"] for job in process["running"]] == [jid]
        shown = invoke("processes")
        assert shown.exit_code == 0, shown.output
        assert re.search(rf"│ {re.escape(process['identity'])}\s+│ alive .*│ 1/10 ", shown.stdout)
        assert re.search(rf"│ {jid}\s+│ hold\s+│ default", shown.stdout)


def test_periodic_shows_the_schedule_and_the_next_run(jobs: adminapp.Jobs) -> None:
    [tick] = invoke_json("periodic")["periodic"]
    assert {k: tick[k] for k in ("name", "schedule", "tz", "queue", "last_run", "running")} \
        == {"name": "tick", "schedule": "0 * * * *", "tz": "UTC", "queue": "default",
            "last_run": None, "running": False}
    assert time.time() < tick["next_run"] <= time.time() + 3600
    shown = invoke("periodic").stdout
    assert re.search(r"│ tick\s+│ 0 \* \* \* \* │ UTC\s+│ default │ in \d+[sm]", shown)


# -- actions ------------------------------------------------------------------------------


def test_a_queued_job_is_deleted_by_its_token_and_a_second_time_is_gone(
    jobs: adminapp.Jobs,
) -> None:
    async def enqueue() -> None:
        for name in ("a", "b", "c"):
            await jobs.ok.enqueue(name)

    in_loop(jobs, enqueue)
    token = invoke_json("queues", "default")["items"][1]["token"]
    deleted = invoke("queues", "default", "--delete", token)
    assert deleted.exit_code == 0, deleted.output
    assert "delete: 1 done" in deleted.stdout
    left = invoke_json("queues", "default")["items"]
    assert [item["args"] for item in left] == [["a"], ["c"]]

    again = invoke("queues", "default", "--delete", token)
    assert again.exit_code == 1
    assert "1 gone" in again.stdout
    assert len(invoke_json("queues", "default")["items"]) == 2


def test_clearing_a_queue_with_yes_deletes_its_jobs_and_its_name(jobs: adminapp.Jobs) -> None:
    async def enqueue() -> None:
        for name in ("a", "b", "c"):
            await jobs.ok.options(queue="low").enqueue(name)

    in_loop(jobs, enqueue)
    nameless = invoke("queues", "--clear", "--yes")
    assert nameless.exit_code == 2
    assert nameless.stderr.startswith("error: --clear needs a queue NAME")
    cleared = invoke("queues", "low", "--clear", "--yes")
    assert cleared.exit_code == 0, cleared.output
    assert "clear: 3 done" in cleared.stdout
    assert "low" not in {q["name"] for q in invoke_json("queues")["queues"]}


def test_a_dead_job_retried_by_token_is_back_on_its_queue_and_runs(
    jobs: adminapp.Jobs,
) -> None:
    newest, oldest = doomed(jobs, 2)
    retried = invoke("dead", "--retry", oldest["token"])
    assert retried.exit_code == 0, retried.output
    assert "retry: 1 done" in retried.stdout
    assert [item["jid"] for item in invoke_json("dead")["items"]] == [newest["jid"]]
    [queued] = invoke_json("queues", "default")["items"]
    assert (queued["jid"], queued["args"]) == (oldest["jid"], oldest["args"])

    work_until(jobs, sizes(dead=2))  # it ran, failed again, and is filed in dead again
    assert {item["jid"] for item in invoke_json("dead")["items"]} == {newest["jid"],
                                                                      oldest["jid"]}
    assert invoke_json("queues", "default")["items"] == []


def test_retry_all_asks_first_and_then_requeues_every_retry(jobs: adminapp.Jobs) -> None:
    fill(jobs)
    waiting = {item["jid"] for item in invoke_json("retries")["items"]}

    declined = invoke("retries", "--retry-all", answer="n\n")
    assert declined.exit_code == 1
    assert "nothing done" in declined.stderr
    assert invoke_json("retries")["total"] == 2

    agreed = invoke("retries", "--retry-all", answer="y\n")
    assert agreed.exit_code == 0, agreed.output
    assert "retry-all: 2 done" in agreed.stdout
    assert invoke_json("retries")["total"] == 0
    assert {item["jid"] for item in invoke_json("queues", "default")["items"]} == waiting


def test_delete_all_with_yes_empties_dead_without_asking(jobs: adminapp.Jobs) -> None:
    doomed(jobs, 3)
    result = invoke("dead", "--delete-all", "--yes", "--json")
    assert result.exit_code == 0, result.output
    assert '"done": 3' in result.stdout
    assert invoke_json("dead")["total"] == 0
    assert invoke_json("stats")["dead"] == 0


def test_kill_moves_a_scheduled_job_to_dead_and_dead_refuses_kill(jobs: adminapp.Jobs) -> None:
    in_loop(jobs, lambda: jobs.ok.enqueue_in(600, "later"))
    [entry] = invoke_json("scheduled")["items"]
    killed = invoke_json("scheduled", "--kill", entry["token"])
    assert killed == {"action": "kill", "done": 1, "gone": 0, "refused": []}
    [dead] = invoke_json("dead")["items"]
    assert dead["jid"] == entry["jid"]

    refused = invoke("dead", "--kill", dead["token"])
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: ")
    assert invoke_json("dead")["total"] == 1


# -- failures -------------------------------------------------------------------------------


def test_a_token_that_names_nothing_any_more_exits_1(jobs: adminapp.Jobs) -> None:
    [entry] = doomed(jobs, 1)
    assert invoke("dead", "--delete", entry["token"]).exit_code == 0
    gone = invoke("dead", "--retry", entry["token"], "--json")
    assert gone.exit_code == 1
    assert '"gone": 1' in gone.stdout
    assert invoke_json("queues", "default")["items"] == []


def test_a_malformed_token_is_refused_before_anything_is_done(jobs: adminapp.Jobs) -> None:
    [entry] = doomed(jobs, 1)
    in_loop(jobs, lambda: jobs.ok.enqueue("kept"))
    [queued] = invoke_json("queues", "default")["items"]
    # A set's action takes a jid too: what is neither a token nor a jid is refused, and a
    # jid no entry holds names nothing (exit 1); either way before anything is done.
    for args, bad, code, said in (
            (("dead", "--delete", entry["token"]), 'not"a-jid', 2,
             "error: not an entry token or jid: 'not\"a-jid'"),
            (("dead", "--delete", entry["token"]), "not-a-token", 1,
             "error: no entry of dead holds jid 'not-a-token'"),
            (("queues", "default", "--delete", queued["token"]), "not-a-token", 2,
             "error: not an entry token: 'not-a-token'")):
        result = invoke(*args, "--delete", bad)
        assert result.exit_code == code, result.output
        assert result.stderr.startswith(said), result.stderr
        assert no_traceback(result.output)
    # The good tokens given with the bad one were not acted on either.
    assert invoke_json("dead")["total"] == 1
    assert invoke_json("queues", "default")["total"] == 1


def test_a_bad_page_or_search_is_a_usage_error(jobs: adminapp.Jobs) -> None:
    for args in (("dead", "--page", "0"), ("queues", "default", "--size", "100000"),
                 ("retries", "--search", " "), ("queues", "no spaces allowed")):
        result = invoke(*args)
        assert result.exit_code == 2, args
        assert result.stderr.startswith("error: "), args
        assert no_traceback(result.output)
    for target in ("no_such_module:jobs", "tests.cli.adminapp:nothing", "no-colon"):
        result = CliRunner().invoke(cli, ["stats", target])
        assert result.exit_code == 2, args
        assert result.stderr.startswith("error: "), args
        assert no_traceback(result.output)


def test_unreachable_redis_is_a_clear_error_and_hides_the_password(
    jobs: adminapp.Jobs,
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = invoke("stats", "--redis-url", f"redis://:secret@127.0.0.1:{port}")
    assert result.exit_code == 3  # Redis out of reach, as for `run` (README: exit codes)
    assert result.stderr.startswith(f"error: cannot reach Redis at redis://:***@127.0.0.1:{port}")
    assert "secret" not in result.output
    assert no_traceback(result.output)
    assert result.stdout == ""


def test_stats_days_adds_the_per_day_counts(jobs: adminapp.Jobs) -> None:
    fill(jobs)
    summary = invoke_json("stats", "--days", "3")
    history = summary["history"]
    assert len(history) == 3
    assert history == sorted(history, key=lambda day: day["day"])  # oldest first
    # Summed (a run across midnight UTC splits the counts between two days).
    assert sum(day["processed"] for day in history) == summary["processed"] == 6
    assert sum(day["failed"] for day in history) == summary["failed"] == 3
    shown = invoke("stats", "--days", "3")
    assert "per day (UTC)" in shown.stdout
    assert re.search(rf"│ {history[-1]['day']} │", shown.stdout)
    assert invoke("stats", "--days", "400").exit_code == 2
