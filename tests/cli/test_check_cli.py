"""``processes APP --check``: a health check by exit code, as arq's ``--check`` — 0 while
a worker process of the App is alive, 1 when none is (before its first start, after it
stopped), 3 when Redis is out of reach; one line, nothing else."""

from __future__ import annotations

from tests.cli import adminapp
from tests.cli.conftest import eventually, invoke, worker_thread


def test_check_exits_0_only_while_a_worker_is_alive(jobs: adminapp.Jobs) -> None:
    before = invoke("processes", "--check")
    assert before.exit_code == 1, before.output
    assert "no worker process of this App is alive" in before.stderr

    with worker_thread(jobs):
        eventually(lambda: invoke("processes", "--check").exit_code == 0)
        alive = invoke("processes", "--check")
        assert alive.stdout == "ok: 1 worker process alive\n"

    after = invoke("processes", "--check")  # a graceful stop says it is gone
    assert after.exit_code == 1, after.output


def test_check_exits_3_when_redis_is_out_of_reach(jobs: adminapp.Jobs) -> None:
    result = invoke("processes", "--check", "--redis-url", "redis://127.0.0.1:1/0")
    assert result.exit_code == 3, result.output
    assert "error:" in result.stderr
