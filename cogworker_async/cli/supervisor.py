"""Supervisor: ``run --processes N`` — N worker processes from one command, kept running.

One worker process uses one core (Python's GIL). The supervisor starts N children, each a
full worker (``cogworker-async run`` with the same options, its own identity), and never
talks to Redis itself: what a child runs is settled and recovered exactly as for any
worker, so a child's crash is the crash any worker can have (its jobs come back through
orphan recovery).

- A child that dies is started again, with a backoff (1 s doubling to 30 s; back to 1 s
  once a child has lived a minute), and the death is logged with its exit code or signal.
- Each child says when its worker has started (one byte on a pipe, ``ready``). Only a
  child that exits before that "could not start": exit 2 (a bad setting, an App that
  fails to import) stops the supervisor with 2; exit 3 (Redis refusing or unreachable)
  stops it with 3 while no child has started yet (a fleet that was up rides out a
  Redis outage: the child is started again). A child that had started and then exited,
  with any code, crashed: it is started again, and its jobs come back through orphan
  recovery, counted there — a job that keeps killing its process goes to dead after
  ``max_orphanings`` (exit 2 from a job's ``sys.exit(2)`` is no usage error).
- A child past ``--max-memory`` (its resident memory, read from ``/proc``) is stopped
  gracefully (SIGTERM: its jobs may finish) and replaced when it has exited; so is one
  that ran ``--max-jobs`` jobs (it stops itself) — Sidekiq swarm's memory killer,
  Celery's ``max-tasks-per-child``. The memory stop is bounded: a child still running
  ``memory_grace`` seconds after the SIGTERM, or grown ``HARD_MEMORY_FACTOR`` times
  meanwhile (a job blocking the loop never sees the SIGTERM), gets SIGKILL. The
  jobs it still ran come back through orphan recovery, each counted as a crash: a job
  too big for the limit goes to dead (ProcessDied) after ``max_orphanings`` kills,
  where one given back by a graceful stop would come back uncounted, forever.
- ``--reload``: a change to a ``.py`` file under the current directory restarts every
  child gracefully (``watchfiles``, the ``reload`` extra).
- ``--burst``: a child that found nothing left to do exits 0 and is not replaced; the
  supervisor exits once every child has.
- SIGTERM/SIGINT is passed on to every child (a graceful stop); a second one is passed
  on again (each child then stops at once). The supervisor exits once every child has,
  with ``exit_code``'s code.
- Each child asks for ``PR_SET_PDEATHSIG`` (Linux) as it starts (``die_with``): if the
  supervisor itself is killed, its children get SIGTERM and stop gracefully — no
  orphaned workers.

The decisions (what to do with a child that exited, when to start it again, what the
supervisor's own exit code is) and the reading of ``--processes`` and ``--max-memory``
are pure functions in ``cli/supervisor_rules.py``, re-exported here (``__all__``: the
CLI and the tests name them as this module's); ``Supervisor`` does the I/O.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cogworker_async import environment
from cogworker_async.cli.supervisor_rules import (
    EXIT_HARD_STOP,
    EXIT_OK,
    EXIT_RECYCLE,
    EXIT_REDIS,
    EXIT_USAGE,
    FIRST_BACKOFF,
    HARD_MEMORY_FACTOR,
    MAX_BACKOFF,
    MAX_PROCESSES,
    MEMORY_GRACE_MAX,
    STEADY_AFTER,
    Verdict,
    cgroup_cpu_quota,
    exit_code,
    memory_grace,
    next_backoff,
    parse_processes,
    parse_size,
    usable_cores,
    verdict,
)
from cogworker_async.errors import install_extra

__all__ = [
    "EXIT_HARD_STOP", "EXIT_OK", "EXIT_RECYCLE", "EXIT_REDIS", "EXIT_USAGE", "FIRST_BACKOFF",
    "HARD_MEMORY_FACTOR", "MAX_BACKOFF", "MAX_PROCESSES", "MEMORY_EVERY", "MEMORY_GRACE_MAX",
    "PR_SET_PDEATHSIG", "STEADY_AFTER", "TICK", "Slot", "Supervisor", "Verdict",
    "cgroup_cpu_quota", "child_argv", "die_with", "exit_code", "memory_grace",
    "next_backoff", "parse_processes", "parse_size", "rss_of", "usable_cores", "verdict",
]

log = logging.getLogger(__name__)

TICK: Final = 0.1
"""Seconds between the supervisor's looks at its children and signals."""
MEMORY_EVERY: Final = 1.0
"""Seconds between reads of the children's memory (``--max-memory``)."""

WATCH_READY: Final = 10.0
"""Seconds ``--reload`` waits for its watcher to be watching before the first children
start (it sets up a watch per directory under the root, a ``.venv`` included: seconds on
a busy machine). A change saved in between would be missed, its reload never done."""
WATCH_TICK_MS: Final = 100
"""How often the watcher's thread looks up from the files (to say it is watching)."""
PR_SET_PDEATHSIG: Final = 1


def rss_of(pid: int) -> int | None:
    """Resident memory of process ``pid`` in bytes (Linux ``/proc``); None if unknown."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def die_with(supervisor: str) -> None:
    """In a child, as it starts: SIGTERM this process when its supervisor (``host:pid``,
    from ``$COGWORKER_SUPERVISOR``) dies (Linux ``PR_SET_PDEATHSIG``), so that killing
    the supervisor leaves no orphaned workers. Set from the child itself rather than in
    a pre-exec hook (unsafe in a process with threads)."""
    try:
        pid = int(supervisor.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the children outlive a killed parent
        return
    # The supervisor may have died before the prctl: no signal would ever come then.
    if os.getppid() != pid:
        os.kill(os.getpid(), signal.SIGTERM)


@dataclass(slots=True)
class Slot:
    """One of the N places a child runs in."""

    number: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    due: float = 0.0
    """``time.monotonic()`` at which to start its next child (a backoff)."""
    backoff: float | None = None
    recycling: str | None = None
    """Why its child was asked to stop to be replaced (memory, reload); None if not."""
    kill_at: float | None = None
    """``time.monotonic()`` at which a child stopped for memory gets SIGKILL."""
    stop_rss: int = 0
    """Its child's resident memory (bytes) when it was stopped for memory."""
    ready_pipe: int | None = None
    """The read end of its child's ready pipe (``environment.READY_FD``)."""
    ready: bool = False
    """Its child has said that its worker started."""
    failed_start: bool = False
    """Its last child failed before its worker started (its code stands on a stop)."""
    done: bool = False
    codes: list[int] = field(default_factory=list)


@dataclass
class Supervisor:
    """Starts ``count`` children with ``argv`` (each given its slot number through
    ``argv_of``) and keeps them running until a signal or, in burst mode, until each
    found nothing left to do."""

    argv_of: Callable[[int], list[str]]
    count: int
    max_memory: int | None = None
    memory_grace: float = MEMORY_GRACE_MAX
    burst: bool = False
    reload_root: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    slots: list[Slot] = field(init=False)
    _signals: list[int] = field(default_factory=list, init=False)
    _changed: threading.Event = field(default_factory=threading.Event, init=False)
    _stop_watch: threading.Event = field(default_factory=threading.Event, init=False)
    _watching: threading.Event = field(default_factory=threading.Event, init=False)
    fatal: int | None = field(default=None, init=False)
    """The exit code of a child that could not start: the supervisor's own."""
    fleet_up: bool = field(default=False, init=False)
    """Some child has said that its worker started."""

    def __post_init__(self) -> None:
        self.slots = [Slot(number) for number in range(self.count)]

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until every child has exited; the exit code (``exit_code``)."""
        previous = {signum: signal.signal(signum, self._on_signal)
                    for signum in (signal.SIGTERM, signal.SIGINT)}
        watcher = self._watch_files() if self.reload_root is not None else None
        log.info("supervisor %s: starting %d worker process%s", self.name, self.count,
                 "" if self.count == 1 else "es")
        next_memory = time.monotonic()
        try:
            while True:
                self._handle_signals()
                if self._changed.is_set():
                    self._changed.clear()
                    self._recycle_all("code changed (--reload)")
                    for slot in self.slots:  # one that could not start: try again now
                        if slot.process is None and slot.due == float("inf"):
                            slot.due = time.monotonic()
                for slot in self.slots:
                    self._look_after(slot)
                if self.max_memory is not None and time.monotonic() >= next_memory:
                    next_memory = time.monotonic() + MEMORY_EVERY
                    self._check_memory()
                if all(slot.done and slot.process is None for slot in self.slots):
                    break
                time.sleep(TICK)
        finally:
            self._stop_watch.set()
            if watcher is not None:
                watcher.join(2.0)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        codes = [code for slot in self.slots for code in slot.codes[-1:]]
        code = exit_code(codes, hard=len(self._signals) > 1, fatal=self.fatal)
        log.info("supervisor %s: all worker processes have exited (exit %d)", self.name,
                 code)
        return code

    @property
    def name(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()}"

    @property
    def stopping(self) -> bool:
        return bool(self._signals) or self.fatal is not None

    def _on_signal(self, signum: int, frame: object) -> None:
        self._signals.append(signum)

    def _handle_signals(self) -> None:
        seen = getattr(self, "_seen_signals", 0)
        for signum in self._signals[seen:]:
            again = seen > 0
            log.info("%s%s: passing it on to %d worker process(es)%s",
                     signal.Signals(signum).name, " again" if again else "",
                     sum(1 for slot in self.slots if slot.process is not None),
                     " (they stop at once)" if again else " (they stop gracefully)")
            for slot in self.slots:
                slot.done = True
                if slot.process is not None:
                    self._signal(slot, signal.SIGTERM)
            seen += 1
        self._seen_signals = seen

    def _look_after(self, slot: Slot) -> None:
        process = slot.process
        if process is None:
            if not slot.done and not self.stopping and time.monotonic() >= slot.due:
                self._start(slot)
            return
        self._read_ready(slot)
        code = process.poll()
        if code is None:
            if slot.kill_at is not None and time.monotonic() >= slot.kill_at:
                self._kill(slot, f"still running {self.memory_grace:g}s after its SIGTERM")
            return
        self._read_ready(slot)  # a byte written just before it exited
        if slot.ready_pipe is not None:
            os.close(slot.ready_pipe)
            slot.ready_pipe = None
        slot.process, slot.kill_at = None, None
        self._exited(slot, process, code)

    def _exited(self, slot: Slot, process: subprocess.Popen[bytes], code: int) -> None:
        lived = time.monotonic() - slot.started
        # Asked to stop while it was still starting (before its handlers were in): the
        # default SIGTERM ended it, with nothing fetched yet — a clean stop.
        asked = self.stopping or slot.recycling is not None
        clean = EXIT_OK if asked and code == -signal.SIGTERM else code
        # Stopped before it ever started, after one that exited with an error before it
        # started (Redis unreachable): the stop does not make that failure clean — the
        # slot never got going again, and SIGINT reports why. A kill is no such failure
        # (a SIGKILLed child, replaced: a clean stop is 0).
        if not (asked and clean == EXIT_OK and not slot.ready and slot.failed_start):
            slot.codes.append(clean)
        slot.failed_start = not slot.ready and clean > EXIT_OK
        what = verdict(code, asked_to_stop=self.stopping, recycling=slot.recycling is not None,
                       burst=self.burst, ready=slot.ready, fleet_up=self.fleet_up,
                       reloading=self.reload_root is not None)
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        if what == "done":
            slot.done = True
            log.info("worker process %d (slot %d) exited (%s)", process.pid, slot.number, how)
        elif what == "replace":
            self._replace(slot, process.pid, how, lived)
        elif what == "wait":
            slot.due = float("inf")
            log.error("worker process %d (slot %d) could not start (%s): waiting for the "
                      "next change (--reload)", process.pid, slot.number, how)
        elif what == "fatal":
            log.error("worker process %d (slot %d) could not start (%s): stopping",
                      process.pid, slot.number, how)
            self.fatal = code
            for other in self.slots:
                other.done = True
                if other.process is not None:
                    self._signal(other, signal.SIGTERM)
        else:
            slot.backoff = next_backoff(slot.backoff, lived)
            slot.due = time.monotonic() + slot.backoff
            log.warning("worker process %d (slot %d) died (%s) after %.1fs: starting another "
                        "in %.0fs (its jobs are recovered as any dead worker's)", process.pid,
                        slot.number, how, lived, slot.backoff)

    def _read_ready(self, slot: Slot) -> None:
        """Whether the child has said its worker started (a byte on its ready pipe)."""
        if slot.ready or slot.ready_pipe is None:
            return
        try:
            said = os.read(slot.ready_pipe, 1)
        except BlockingIOError:  # nothing yet
            return
        if said:
            slot.ready = self.fleet_up = True

    def _replace(self, slot: Slot, pid: int, how: str, lived: float) -> None:
        why = slot.recycling or "--max-jobs reached"
        # Recycled for memory soon after its start: a --max-memory below what a fresh
        # worker needs would restart it in a loop; it backs off as a death does.
        quick = why.startswith("memory") and lived < STEADY_AFTER
        slot.backoff = next_backoff(slot.backoff, lived) if quick else None
        slot.due = time.monotonic() + (slot.backoff or 0.0)
        log.log(logging.WARNING if quick else logging.INFO,
                "worker process %d (slot %d) exited (%s; %s): starting a fresh one%s",
                pid, slot.number, how, why,
                f" in {slot.backoff:.0f}s (recycled {lived:.1f}s after its start: is "
                "--max-memory below a fresh worker's size?)" if quick else "")
        slot.recycling = None

    def _start(self, slot: Slot) -> None:
        readable, writable = os.pipe()  # both ends close-on-exec: pass_fds opens one
        os.set_blocking(readable, False)
        env = {**os.environ, **self.env, environment.SUPERVISOR: self.name,
               environment.READY_FD: str(writable)}
        # Its own process group: a terminal's Ctrl-C (or a stop signal sent to the
        # group) reaches the supervisor only, which passes it on once — a child signalled
        # twice would stop at once. PDEATHSIG still ties it to the supervisor.
        try:
            slot.process = subprocess.Popen(self.argv_of(slot.number), env=env,
                                            process_group=0, pass_fds=(writable,))
        except BaseException:
            os.close(readable)
            raise
        finally:
            os.close(writable)  # the child's copy only: EOF once it has exited
        slot.ready_pipe, slot.ready = readable, False
        slot.started = time.monotonic()
        log.info("worker process %d started (slot %d)", slot.process.pid, slot.number)

    def _signal(self, slot: Slot, signum: int) -> None:
        if slot.process is not None:
            try:
                slot.process.send_signal(signum)
            except ProcessLookupError:  # exited meanwhile: poll() says so next
                pass

    def _kill(self, slot: Slot, why: str) -> None:
        """The end of a memory stop's grace: SIGKILL. Its jobs are then recovered as a
        crashed worker's, counted towards ``max_orphanings`` (see ``memory_grace``)."""
        if slot.process is None:
            return
        log.warning("worker process %d (slot %d) stopped for --max-memory is %s: killing "
                    "it (SIGKILL; its jobs are recovered as a dead worker's, counted as "
                    "a crash)", slot.process.pid, slot.number, why)
        slot.kill_at = None
        self._signal(slot, signal.SIGKILL)

    def _recycle(self, slot: Slot, why: str) -> bool:
        """Stop its child gracefully, to start a fresh one; False if it was not asked."""
        if slot.process is None or slot.recycling is not None or self.stopping:
            return False
        slot.recycling = why
        log.info("worker process %d (slot %d): %s: stopping it gracefully to start a "
                 "fresh one", slot.process.pid, slot.number, why)
        self._signal(slot, signal.SIGTERM)
        return True

    def _recycle_all(self, why: str) -> None:
        for slot in self.slots:
            self._recycle(slot, why)

    def _check_memory(self) -> None:
        assert self.max_memory is not None
        for slot in self.slots:
            if slot.process is None:
                continue
            rss = rss_of(slot.process.pid)
            if rss is None or rss <= self.max_memory:
                continue
            if slot.recycling is None:
                if self._recycle(slot, f"memory {rss / 1024**2:.0f} MiB over --max-memory "
                                       f"{self.max_memory / 1024**2:.0f} MiB"):
                    slot.kill_at = time.monotonic() + self.memory_grace
                    slot.stop_rss = rss
            elif slot.kill_at is not None and rss > HARD_MEMORY_FACTOR * slot.stop_rss:
                self._kill(slot, f"at {rss / 1024**2:.0f} MiB, {HARD_MEMORY_FACTOR:g}x its "
                                 f"{slot.stop_rss / 1024**2:.0f} MiB at the SIGTERM")

    def _watch_files(self) -> threading.Thread:
        try:
            import watchfiles
        except ImportError:  # checked by the CLI first; here only if it went missing
            log.error("--reload needs watchfiles; %s", install_extra("reload"))
            return threading.Thread()
        root = self.reload_root or Path.cwd()

        def watch() -> None:
            # An empty set every WATCH_TICK_MS without changes: the first says the watch
            # is set up (the generator sets it up on its first step, in this thread).
            for changes in watchfiles.watch(root, stop_event=self._stop_watch,
                                            watch_filter=watchfiles.PythonFilter(),
                                            raise_interrupt=False, rust_timeout=WATCH_TICK_MS,
                                            yield_on_timeout=True):
                self._watching.set()
                if not changes:
                    continue
                log.info("--reload: %d file(s) changed, e.g. %s", len(changes),
                         sorted(path for _, path in changes)[0])
                self._changed.set()

        thread = threading.Thread(target=watch, name="cogworker-reload", daemon=True)
        thread.start()
        if not self._watching.wait(WATCH_READY):
            log.warning("--reload: the watcher is not watching after %.0f s; a change "
                        "saved before it is may be missed", WATCH_READY)
        return thread


def child_argv(target: str, options: Sequence[str]) -> list[str]:
    """The command line of one child: this Python, ``cogworker-async run TARGET`` with
    the options every child shares."""
    return [sys.executable, "-m", "cogworker_async", "run", target, *options]
