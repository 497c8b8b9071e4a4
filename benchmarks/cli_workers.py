"""Each system's worker as its users start it: its own CLI, as subprocesses (stdlib only).

``run.py``'s ``noop`` and ``processes`` scenarios use this. ``commands()`` is the one
place that says how each system's worker is started (command line, concurrency,
settings); ``describe()`` renders the same commands for RESULTS.md, so the method text
cannot drift from what ran. ``Fleet`` starts those commands, times them from their jobs
and stops them.

Timing without touching the worker: each job (``peers/common.py``) writes its process's
count, first and last start (``time.monotonic()``: one clock for every process on Linux)
and its CPU before its first job into a slot of its own, a small shared file under
``BENCH_SLOTS``; the driver only reads those files.

- One process: rate = (jobs − 1) / (last start − first start), so a CLI's imports and
  start-up are left out, as they are for an embedded worker; its CPU from just before its
  first job, any other process of its group from when the driver saw that job.
- N processes: the window opens when the driver sees that all N have started a job (it
  looks every ``POLL_FIRST``): rate = (jobs − jobs by then) / (last start − then), and
  every process's CPU from then. Processes of a fleet start a few hundred ms apart (each
  imports its app while the others already work, on the same cores): counted from the
  first job, a short run would measure that stagger, not N processes working.

Redis' CPU is taken over the same window.

Each command runs in a process group of its own (``start_new_session``): it is stopped
as a terminal's Ctrl-C would (SIGINT to the group, so pools whose parent does not pass
signals on stop too; a supervisor whose children sit in groups of their own passes it
on), then any process of its tree still there is killed by its id (checked against its
start time) — no stray workers. The CPU counted is that of each command's process tree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
import shlex
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
VENVS = HERE / ".venvs"
OUR_BIN = HERE / ".venvs" / "cogworker" / "bin"  # run.py's our_worker_python()

SLOT = struct.Struct("<qddd")
"""jobs, last start, first start, CPU at the first job: ``peers/common.py``'s ``SLOT``."""
FIRST_JOB_TIMEOUT = 90.0
"""Seconds for a fleet to start its first job (imports, connections: a few seconds)."""
POLL_FIRST = 0.002
"""Seconds between looks at the slots until the first job (the CPU window opens then)."""
POLL = 0.01
"""Seconds between looks at the slots while the jobs run: its end is when the driver
sees the last job (the jobs' own stamps give the rate); a short poll keeps the CPU window
tight, a 2-core machine's worker pays for a shorter one."""
STOP_GRACE = 15.0
"""Seconds a fleet has to stop after SIGINT before what is left of it is killed."""
QUIET = "WARNING"
"""Every system logs at WARNING (none logs a line per job), as the embedded mode did."""


@dataclasses.dataclass(frozen=True)
class Launch:
    """What to start: one command per process group (two arq processes: two)."""

    argvs: list[list[str]]
    env: dict[str, str]


def _bin(venv: str | None, name: str) -> str:
    return str((OUR_BIN if venv is None else VENVS / venv / "bin") / name)


def commands(venv: str | None, mode: str, processes: int, concurrency: int,
             url: str) -> list[list[str]]:
    """The command lines that start ``processes`` worker processes of a system (``venv``:
    its venv, None for ours), ``concurrency`` jobs at once in each."""
    c, p = str(concurrency), str(processes)
    if venv is None:  # one process: plain `run`; more: its supervisor
        return [[_bin(None, "cogworker-async"), "run", "cogworker_app:app",
                 "--concurrency", c, "--log-level", QUIET,
                 *(["--processes", p] if processes > 1 else [])]]
    if venv == "arq":  # no multi-process mode: N processes started side by side
        return [[_bin("arq", "arq"), "arq_app.WorkerSettings",
                 "--custom-log-dict", "arq_app.LOG_CONFIG"]] * processes
    if venv == "saq":
        return [[_bin("saq", "saq"), "saq_app.settings",
                 *(["--workers", p] if processes > 1 else [])]]
    if venv == "taskiq":  # --workers defaults to 2: always said
        return [[_bin("taskiq", "taskiq"), "worker", "taskiq_app:broker", "--workers", p,
                 "--max-async-tasks", c, "--log-level", QUIET]]
    if venv == "streaq":
        return [[_bin("streaq", "streaq"), "run", "streaq_app:worker",
                 *(["--workers", p] if processes > 1 else [])]]
    if venv == "rq":  # SimpleWorker: jobs in the worker process (the default forks per job)
        common = ["-u", url, "-w", "rq.worker.SimpleWorker", "-P", str(PEERS)]
        if processes > 1:
            return [[_bin("rq", "rq"), "worker-pool", "-n", p, *common, "-l", QUIET,
                     "default"]]
        return [[_bin("rq", "rq"), "worker", *common, "--logging_level", QUIET, "default"]]
    raise ValueError(f"no CLI worker for {venv!r}")


SETTINGS = {
    None: "`cogworker_app.py`: the `App` of `cogworker_peer.py` (reliable fetch, the "
          "defaults); uvloop picked by the CLI",
    "arq": "`arq_app.WorkerSettings`: `max_jobs`={c} (arq's default 10), `poll_delay` "
           "{poll} (default 0.5 s); arq's default log config logs every job at INFO, so "
           "`LOG_CONFIG` sets WARNING; uvloop's policy set in the module (arq's CLI makes "
           "a plain asyncio loop)",
    "saq": "`saq_app.settings`: `{{queue, functions, concurrency: {c}}}` (SAQ's default "
           "concurrency 10, logging WARNING by default); uvloop's policy set in the "
           "module (SAQ's CLI makes a plain asyncio loop)",
    "taskiq": "`taskiq_app.broker`: `{broker}` of taskiq-redis; `--max-async-tasks` {c} "
              "(default 100), `--max-prefetch` 0 (default), `--ack-type` when_saved "
              "(default); uvloop picked by the CLI",
    "streaq": "`streaq_app.worker`: `Worker(concurrency={c})` (default 16, prefetch = "
              "concurrency, the default), uvloop via `anyio_kwargs`; the CLI logs every "
              "task at INFO with no option for less, so a lifespan sets WARNING",
    "rq": "`SimpleWorker` runs each job in the worker process, one at a time (RQ's "
          "default `Worker` forks a process per job: slower still); jobs `rq_peer.noop`",
}


def describe(venv: str | None, mode: str, processes: int, concurrency: int) -> str:
    """The command lines of ``commands()`` as shown in RESULTS.md, with the settings."""
    shown = []
    for argv in commands(venv, mode, processes, concurrency, "$URL"):
        words = [Path(argv[0]).name, *argv[1:]]
        words = ["peers/" if w == str(PEERS) else w for w in words]
        shown.append("`" + shlex.join(words).replace("'$URL'", "$URL") + "`")
    text = " and ".join(shown) if len(set(shown)) > 1 else \
        (f"{len(shown)} × " if len(shown) > 1 else "") + shown[0]
    broker = "RedisStreamBroker" if mode == "stream" else "ListQueueBroker"
    poll = "10 ms" if mode == "poll10ms" else "0.5 s"
    return text + " — " + SETTINGS[venv].format(c=concurrency, broker=broker, poll=poll)


def environment(url: str, mode: str, concurrency: int, slots: Path) -> dict[str, str]:
    """The app modules' settings (``common.app_args``) and the jobs' slots."""
    return {**os.environ, "BENCH_REDIS_URL": url, "BENCH_MODE": mode,
            "BENCH_CONCURRENCY": str(concurrency), "BENCH_SLOTS": str(slots),
            "PYTHONPATH": str(PEERS), "PYTHONUNBUFFERED": "1"}


# -- reading processes -----------------------------------------------------------------

def proc_cpu(pid: int) -> float:
    """CPU seconds a process has used, all threads (``/proc/<pid>/task/*/schedstat``,
    in ns; ``/proc/<pid>/stat`` ticks, 10 ms, are too coarse for an idle process)."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def tree(roots: set[int]) -> list[int]:
    """The live processes ``roots`` and their descendants (by parent pid: a pool's or a
    supervisor's children may sit in process groups of their own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))  # ppid
    found, todo = [], [pid for pid in roots if Path(f"/proc/{pid}").exists()]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def started_at(pid: int) -> int | None:
    """A process's start time (clock ticks since boot), None once it has exited: with
    its pid it names one process, so a pid reused by another is never signalled."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else int(fields[19])  # a zombie is gone too
    except (OSError, ValueError, IndexError):
        return None


class Slots:
    """The fleet's slots (one file per process that ran a job), read in place."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.maps: dict[int, mmap.mmap] = {}

    def read(self) -> dict[int, tuple[int, float, float, float]]:
        for entry in os.listdir(self.directory):
            if entry.isdigit() and int(entry) not in self.maps:
                with open(self.directory / entry, "rb") as file:
                    self.maps[int(entry)] = mmap.mmap(file.fileno(), SLOT.size,
                                                      access=mmap.ACCESS_READ)
        return {pid: SLOT.unpack_from(m, 0) for pid, m in self.maps.items()}

    def close(self) -> None:
        for m in self.maps.values():
            m.close()
        self.maps.clear()


class FleetError(Exception):
    pass


class Fleet:
    """One measurement: start the commands, wait for ``n`` jobs, stop them."""

    def __init__(self, launch: Launch, slots: Path, log_path: Path) -> None:
        self.launch = launch
        self.slots = Slots(slots)
        self.log_path = log_path
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> float:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(self.log_path, "w")
        started = time.monotonic()
        for argv in self.launch.argvs:
            self.log.write("$ " + shlex.join(argv) + "\n")
            self.log.flush()
            self.processes.append(subprocess.Popen(
                argv, cwd=PEERS, env=self.launch.env, stdin=subprocess.DEVNULL,
                stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True))
        return started

    def _check_alive(self) -> None:
        for argv, process in zip(self.launch.argvs, self.processes, strict=False):
            if process.poll() is not None:
                raise FleetError(f"{Path(argv[0]).name} exited with {process.returncode} "
                                 f"before its jobs were done (see {self.log_path})")

    def _opening(self, n: int, expected: int, spawned: float) -> tuple[float, int]:
        """Wait until ``expected`` processes have started a job (or ``n`` jobs ran):
        the driver's time just before the look that saw it, and the jobs counted."""
        deadline = spawned + FIRST_JOB_TIMEOUT
        while True:
            now = time.monotonic()
            slots = self.slots.read()
            count = sum(s[0] for s in slots.values())
            if len(slots) >= expected or count >= n:
                return now, count
            self._check_alive()
            if now > deadline:
                raise FleetError(f"{len(slots)} of {expected} processes started a job "
                                 f"within {FIRST_JOB_TIMEOUT:.0f} s (see {self.log_path})")
            time.sleep(POLL_FIRST)

    def measure(self, n: int, cap: float, expected: int,
                redis_cpu: Callable[[], float]) -> dict[str, Any]:
        spawned = self.start()
        roots = {p.pid for p in self.processes}
        opened, before = self._opening(n, expected, spawned)
        redis_before = redis_cpu()
        cpu_before = {pid: proc_cpu(pid) for pid in tree(roots)}
        deadline = time.monotonic() + cap
        while sum(s[0] for s in self.slots.read().values()) < n:
            self._check_alive()
            if time.monotonic() > deadline:
                break
            time.sleep(POLL)
        cpu_now = {pid: proc_cpu(pid) for pid in tree(roots)}
        redis_used = redis_cpu() - redis_before
        time.sleep(0.05)  # the last jobs' stamps are in place (no job starts after n)
        final = self.slots.read()
        done = sum(s[0] for s in final.values())
        first = min(s[2] for s in final.values())
        last = max(s[1] for s in final.values())
        if expected == 1:  # the job process's own stamps and CPU: no poll in the window
            opened, before = first, 1
            cpu_before.update({pid: slot[3] for pid, slot in final.items()})
        worker_cpu = sum(max(0.0, now - cpu_before.get(pid, 0.0))
                         for pid, now in cpu_now.items())
        return {"n": done, "window_jobs": done - before, "window": last - opened,
                "first_job": first - spawned, "stagger": opened - first,
                "worker_cpu": worker_cpu, "redis_cpu": redis_used, "capped": done < n,
                "per_process": sorted((s[0] for s in final.values()), reverse=True),
                "all_started": len(final) >= expected}

    def stop(self) -> None:
        """SIGINT to each group (a terminal's Ctrl-C); after ``STOP_GRACE``, SIGKILL to
        each process of the fleet's trees (as found before the SIGINT) still there."""
        started = {pid: started_at(pid) for pid in tree({p.pid for p in self.processes})}
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))

        def left() -> list[int]:  # each process still there, known by pid and start time
            return [pid for pid, since in started.items()
                    if since is not None and started_at(pid) == since]

        while left() and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in left():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for process in self.processes:
            if process.poll() is None:
                process.wait()
        self.slots.close()
        self.log.close()


def job_processes(venv: str | None, processes: int) -> int:
    """Processes that run jobs per command: ``processes``, but 1 for arq (one command
    per process)."""
    return 1 if venv == "arq" else processes


def run(venv: str | None, mode: str, processes: int, concurrency: int, url: str, n: int,
        cap: float, redis_cpu: Callable[[], float], log_path: Path) -> dict[str, Any]:
    """Start the system's CLI worker(s) over ``n`` queued jobs; what ``Fleet.measure``
    saw. Raises FleetError if it fails to run them."""
    slots = Path(tempfile.mkdtemp(prefix="cogworker-bench-slots-"))
    launch = Launch(commands(venv, mode, processes, concurrency, url),
                    environment(url, mode, concurrency, slots))
    fleet = Fleet(launch, slots, log_path)
    try:
        return fleet.measure(n, cap, len(launch.argvs) * job_processes(venv, processes),
                             redis_cpu)
    finally:
        if fleet.processes:
            fleet.stop()
        shutil.rmtree(slots, ignore_errors=True)
