"""The supervisor's rules (``run --processes``): pure decisions, no process started.

What ``cli/supervisor.py``'s ``Supervisor`` asks before it acts, kept apart from its
process I/O (pipes, signals, ``/proc``) so that each can be read, and tested
(``tests/cli/supervisor/test_supervisor_rules.py``), alone:

- the fleet's size, from the options: ``--processes`` (a count, or ``auto``: the usable
  cores, capped by a cgroup CPU quota) and ``--max-memory`` (a size);
- what to do with a child that exited (``verdict``), how long to wait before starting it
  again (``next_backoff``), how long a child stopped for memory gets (``memory_grace``);
- the supervisor's own exit code once every child has exited (``exit_code``).

``cli/supervisor.py`` re-exports every public name here: callers keep importing them
from there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal

EXIT_OK: Final = 0
EXIT_HARD_STOP: Final = 1
EXIT_USAGE: Final = 2
"""A child refused to start (a bad option or setting, an App that fails to import):
starting it again would fail the same way, so the supervisor stops (the CLI's code)."""
EXIT_REDIS: Final = 3
"""A child found Redis refusing it (a wrong password, NOPERM) or unreachable (after
``--wait-for-redis``) as it started: the CLI's code, the supervisor's too."""
EXIT_RECYCLE: Final = 4
"""A child under a supervisor that stopped after ``--max-jobs``: replace it (distinct
from 0, which under ``--burst`` means its work is done)."""

FIRST_BACKOFF: Final = 1.0
MAX_BACKOFF: Final = 30.0
STEADY_AFTER: Final = 60.0
"""Seconds a child must live for its slot's backoff to start again from the first."""
MEMORY_GRACE_MAX: Final = 10.0
"""Most seconds a child stopped for ``--max-memory`` gets before SIGKILL (``memory_grace``)."""
HARD_MEMORY_FACTOR: Final = 2.0
"""A child stopped for ``--max-memory`` that grows to this many times its size at the
SIGTERM (itself over the limit) gets SIGKILL at once: the probe saw a loop-blocking job
go from 172 MiB to 1.6 GB. Relative to that size, not to the limit: a limit below a
fresh worker's size must not kill one that is merely stopping."""
MAX_PROCESSES: Final = 256

_SIZE: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", re.IGNORECASE)
_UNITS: Final = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int:
    """``--max-memory``: bytes, or with a unit (``512M``, ``1.5G``, ``2GiB``; powers of
    1024); a ValueError saying what is expected otherwise."""
    found = _SIZE.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not a size: use bytes or a number with K, M, G or "
                         "T (e.g. 512M, 1.5G)")
    size = int(float(found.group(1)) * _UNITS[found.group(2).lower()])
    if size <= 0:
        raise ValueError(f"a size must be more than 0, got {text!r}")
    return size


def parse_processes(text: str) -> int:
    """``--processes``: a count (1..256), or ``auto``: the cores this process may use."""
    if text.strip().lower() == "auto":
        return usable_cores()
    try:
        count = int(text)
    except ValueError:
        raise ValueError(f"--processes takes a number or 'auto', not {text!r}") from None
    if not 1 <= count <= MAX_PROCESSES:
        raise ValueError(f"--processes must be between 1 and {MAX_PROCESSES}, got {count}")
    return count


def usable_cores(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: its CPU affinity (else the machine's), capped
    by a cgroup CPU quota where there is one — a container limited to 2 CPUs on a
    64-core node (Kubernetes ``resources.limits.cpu``) should start 2 children, not 64
    throttled ones."""
    if hasattr(os, "sched_getaffinity"):
        cores = max(1, len(os.sched_getaffinity(0)))
    else:
        cores = max(1, os.cpu_count() or 1)
    quota = cgroup_cpu_quota(cgroup_root)
    return cores if quota is None else max(1, min(cores, quota))


def cgroup_cpu_quota(root: Path) -> int | None:
    """Whole CPUs a cgroup quota allows (rounded up), None for no quota. cgroup v2
    ``cpu.max`` ("max 100000" or "200000 100000"), else v1's ``cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us`` (-1: none). Unreadable or odd files mean no quota."""
    try:
        fields = (root / "cpu.max").read_text().split()
    except OSError:
        try:
            fields = [(root / "cpu" / "cpu.cfs_quota_us").read_text().strip(),
                      (root / "cpu" / "cpu.cfs_period_us").read_text().strip()]
        except OSError:
            return None
    if len(fields) != 2 or fields[0] in ("max", "-1"):
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return -(-quota // period)


def memory_grace(shutdown_timeout: float) -> float:
    """Seconds between the SIGTERM of a child over ``--max-memory`` and its SIGKILL: half
    its ``shutdown_timeout``, at most ``MEMORY_GRACE_MAX``. Shorter than the child's own
    deadline on purpose: at that deadline the worker gives its running jobs back, and a
    job given back is not counted — one too big for the limit would come back forever;
    killed, it is recovered as an orphan, counted, and goes to dead in the end."""
    return min(MEMORY_GRACE_MAX, max(0.0, shutdown_timeout) / 2)


def next_backoff(previous: float | None, lived: float) -> float:
    """Seconds to wait before starting again a child that died after ``lived`` seconds
    (``previous``: the last wait in its slot, None for none)."""
    if previous is None or lived >= STEADY_AFTER:
        return FIRST_BACKOFF
    return min(MAX_BACKOFF, previous * 2)


Verdict = Literal["done", "replace", "restart", "fatal", "wait"]


def verdict(code: int, *, asked_to_stop: bool, recycling: bool, burst: bool,
            ready: bool = False, fleet_up: bool = False,
            reloading: bool = False) -> Verdict:
    """What to do with a child that exited with ``code`` (negative: killed by that
    signal); ``ready``: it had said its worker started; ``fleet_up``: some child of this
    supervisor has. ``done`` (leave its slot empty), ``replace`` (start a new one now),
    ``restart`` (start a new one after a backoff: it died), ``fatal`` (stop all: it
    cannot start), ``wait`` (``--reload``: start one at the next change)."""
    if asked_to_stop:
        return "done"
    if recycling or code == EXIT_RECYCLE:
        return "replace"  # memory, a reload, --max-jobs: its replacement is due
    if code == EXIT_OK:
        return "done" if burst else "replace"
    if ready:
        return "restart"  # it started: whatever ended it (a job's sys.exit(2)) is a crash
    if code == EXIT_USAGE:
        # under --reload, a typo saved: the next change may fix it
        return "wait" if reloading else "fatal"
    if code == EXIT_REDIS and not fleet_up:
        return "fatal"  # a wrong password or no Redis at all: restarts would loop
    return "restart"


def exit_code(codes: Sequence[int], *, hard: bool, fatal: int | None) -> int:
    """The supervisor's exit code once every child has exited: ``fatal``, the code of a
    child that could not start (2 usage, 3 Redis), if one did; 1 if stopped hard (a
    second signal); 0 if every slot's last child stopped cleanly; otherwise the first
    failing code (a negative one, a signal, is 1; 5: a child's lifespan raised as it
    was exited). ``codes``: each slot's last code."""
    if fatal is not None:
        return fatal
    if hard:
        return EXIT_HARD_STOP
    failing = [code for code in codes if code != EXIT_OK]
    if not failing:
        return EXIT_OK
    return failing[0] if failing[0] > 0 else EXIT_HARD_STOP
