"""The supervisor's pure decisions: sizes and counts it is given, how long it waits
before starting a dead child again, what it does with a child that exited, and its own
exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from cogworker_async.cli import supervisor
from cogworker_async.cli.supervisor import exit_code, next_backoff, parse_size, verdict


@pytest.mark.parametrize(("text", "size"), [
    ("1048576", 1024**2), ("512M", 512 * 1024**2), ("512m", 512 * 1024**2),
    ("1.5G", int(1.5 * 1024**3)), ("2GiB", 2 * 1024**3), ("64KB", 64 * 1024),
    (" 1T ", 1024**4),
])
def test_sizes_are_bytes_or_a_number_with_a_unit(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1G", "1X", "0", "1.2.3M"])
def test_what_is_not_a_size_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_processes_are_a_count_or_auto() -> None:
    assert supervisor.parse_processes("3") == 3
    assert supervisor.parse_processes("auto") == supervisor.usable_cores() >= 1
    for bad in ("0", "257", "two", ""):
        with pytest.raises(ValueError, match="--processes"):
            supervisor.parse_processes(bad)


@pytest.mark.parametrize(("files", "quota"), [
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu.max": "200000 100000\n"}, 2),
    ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: two children, each throttled a bit
    ({"cpu.max": "50000 100000\n"}, 1),
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cpu.max": "garbage"}, None),
    ({}, None),
])
def test_auto_respects_a_container_cpu_limit(
    tmp_path: Path, files: dict[str, str], quota: int | None,
) -> None:
    """``--processes auto`` in a container limited to 2 CPUs starts 2 children, not one
    per core of the node under it."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert supervisor.cgroup_cpu_quota(tmp_path) == quota
    cores = supervisor.usable_cores(tmp_path)
    assert cores == (min(supervisor.usable_cores(tmp_path / "none"), quota)
                     if quota else supervisor.usable_cores(tmp_path / "none"))


def test_a_child_that_keeps_dying_waits_longer_each_time_up_to_a_bound() -> None:
    waits = []
    previous = None
    for _ in range(8):
        previous = next_backoff(previous, lived=0.5)
        waits.append(previous)
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    # One that lived a minute starts again from the first wait.
    assert next_backoff(30.0, lived=supervisor.STEADY_AFTER) == 1.0


def test_what_happens_to_a_child_that_exited() -> None:
    assert verdict(0, asked_to_stop=True, recycling=False, burst=False) == "done"
    assert verdict(-9, asked_to_stop=True, recycling=False, burst=False) == "done"
    assert verdict(0, asked_to_stop=False, recycling=True, burst=False) == "replace"
    assert verdict(0, asked_to_stop=False, recycling=False, burst=False) == "replace"
    assert verdict(0, asked_to_stop=False, recycling=False, burst=True) == "done"
    assert verdict(2, asked_to_stop=False, recycling=False, burst=False) == "fatal"
    # Exit 2 from a child that had started (a job's sys.exit(2)) is a crash, however
    # young the child: restarted, its job recovered and counted as for any crash.
    assert verdict(2, asked_to_stop=False, recycling=False, burst=False,
                   ready=True) == "restart"
    # Redis refusing or unreachable at the start: the supervisor's exit 3 — unless the
    # fleet was up (an outage: the others ride it out, this one tries again).
    assert verdict(3, asked_to_stop=False, recycling=False, burst=False) == "fatal"
    assert verdict(3, asked_to_stop=False, recycling=False, burst=False,
                   fleet_up=True) == "restart"
    assert verdict(3, asked_to_stop=False, recycling=False, burst=False,
                   ready=True) == "restart"
    assert verdict(1, asked_to_stop=False, recycling=False, burst=False,
                   ready=False) == "restart"
    # Under --reload, a typo saved: wait for the next change.
    assert verdict(2, asked_to_stop=False, recycling=False, burst=False,
                   reloading=True) == "wait"
    # --max-jobs under a supervisor exits 4: replaced, burst or not.
    assert verdict(supervisor.EXIT_RECYCLE, asked_to_stop=False, recycling=False,
                   burst=True) == "replace"
    assert verdict(-9, asked_to_stop=False, recycling=False, burst=False) == "restart"
    assert verdict(3, asked_to_stop=False, recycling=False, burst=True,
                   ready=True) == "restart"
    assert verdict(1, asked_to_stop=False, recycling=False, burst=False) == "restart"


def test_the_supervisor_s_exit_code() -> None:
    assert exit_code([0, 0], hard=False, fatal=None) == 0
    assert exit_code([0, 1], hard=True, fatal=None) == 1
    assert exit_code([2, 0], hard=False, fatal=2) == 2
    assert exit_code([3, 0], hard=False, fatal=3) == 3  # README: 3 Redis unreachable
    assert exit_code([3, 0], hard=True, fatal=3) == 3
    assert exit_code([0, 3], hard=False, fatal=None) == 3
    assert exit_code([-9], hard=False, fatal=None) == 1
    assert exit_code([], hard=False, fatal=None) == 0


def test_a_memory_stop_kills_before_the_worker_gives_its_jobs_back() -> None:
    """The SIGKILL lands before the child's own shutdown deadline (a job given back
    there is not counted, and one too big for --max-memory would come back forever)."""
    assert supervisor.memory_grace(25.0) == supervisor.MEMORY_GRACE_MAX
    assert supervisor.memory_grace(6.0) == 3.0
    assert supervisor.memory_grace(0.0) == 0.0
