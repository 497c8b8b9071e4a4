"""Heartbeat: "this process is alive", from its own thread and its own connection.

A job that blocks the event loop (CPU work, a C call) must not make a live process look
dead and get its jobs recovered — and run twice — by another process. So beats are
written from a thread, and each beat carries the loop's lag, so a stall is visible
rather than fatal. The first beat is written before the first fetch.

Each beat also tells whether this process had been declared dead meanwhile (paused past
``orphan_threshold``, e.g. SIGSTOP or a long GC): the Manager then fences itself (see
``fencing.Fence``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from cogworker_async import environment
from cogworker_async.errors import why
from cogworker_async.jobs import stored, wire
from cogworker_async.redis.beats import ALIVE, ZOMBIE, BeatWriter
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.steadiness import Steadiness
from cogworker_async.worker.streak import Streak

log = logging.getLogger(__name__)

LAG_PROBE_INTERVAL: Final = 0.25
"""Seconds between the loop-lag probe's ticks."""
JOIN_TIMEOUT: Final = 5.0


@dataclass(slots=True)
class LoopLag:
    """Measured on the loop (``tick``), read from the heartbeat thread (``take``)."""

    last_tick: float = field(default_factory=time.monotonic)
    worst: float = 0.0
    latest: float = 0.0
    """The last lag measured (for a metrics scrape: ``take`` is the beat's)."""

    def tick(self, lag: float) -> None:
        self.last_tick = time.monotonic()
        self.worst = max(self.worst, lag)
        self.latest = lag

    def take(self) -> float:
        """The worst lag since the last call, counting a stall still in progress."""
        stalled = time.monotonic() - self.last_tick - LAG_PROBE_INTERVAL
        worst, self.worst = max(self.worst, stalled, 0.0), 0.0
        return worst


def rss_bytes() -> int | None:
    """Resident memory of this process (Linux), for the beat; None where unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def workers_entries(works: Iterable[Work]) -> dict[str, str]:
    """jid -> what it is (JSON), for the workers hash (the dashboard's "running now");
    a job that cannot be read is left out."""
    entries = {}
    for work in works:
        payload = stored.json_value(work.raw, max_depth=None)  # may be anything
        jid, name = (wire.jid(payload), wire.name(payload)) if isinstance(payload, dict) \
            else (None, None)
        if jid is None or name is None:
            continue
        entries[jid] = json.dumps({"queue": work.queue, "class": name,
                                   "run_at": work.fetched_at})
    return entries


class Heartbeat:
    def __init__(
        self,
        writer: BeatWriter,
        *,
        interval: float,
        ttl: float,
        describe: Callable[[], Mapping[str, Any]],
        current_jobs: Callable[[], Iterable[Work]],
        on_zombie: Callable[[], None],
        on_forgotten: Callable[[frozenset[str | None]], None] = lambda slots: None,
        on_alive: Callable[[int], None] = lambda beat: None,
    ) -> None:
        self.writer = writer
        self.interval = interval
        self.ttl = ttl
        self._describe = describe
        self._current_jobs = current_jobs
        """Thread-safe: called from the heartbeat thread (``Ledger.snapshot``)."""
        self._on_zombie = on_zombie
        self._on_forgotten = on_forgotten
        self._on_alive = on_alive
        self.beats_started = 0
        """Beats begun (each beat's number): read from the loop (``Ledger.follow_beats``)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beaten = False
        self.streak = Streak("heartbeat")
        """Touched only by the heartbeat thread (after ``start``)."""
        self.last_failure: float | None = None
        """``time.monotonic()`` of the last beat that failed; None if none did."""
        self.steadiness = Steadiness(gap=2 * interval + writer.timeout)
        """Per slot, since when beats there succeed without a break (``steadiness.py``);
        written by whoever calls ``beat`` (the start-up, then the thread), read by the
        loop."""
        self.started_at = time.time()

    def info(self) -> dict[str, Any]:
        return {
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": self.started_at,
            "rss_bytes": rss_bytes(),
            "supervisor": environment.supervisor(),
            **self._describe(),
        }

    def beat(self) -> None:
        """Write one beat (raises on a Redis error). Fences the process if it was dead."""
        self.beats_started += 1
        number = self.beats_started
        writer = self.writer
        writer.failed = writer.succeeded = frozenset()
        try:
            status = writer.beat(self.info(), self.ttl, first=not self._beaten)
        finally:
            self._note(time.monotonic())
        self._beaten = True
        if status == ALIVE:
            self._on_alive(number)
            return
        if self.writer.forgotten:  # before the fencing: its jobs there are not judged
            self._on_forgotten(self.writer.forgotten)
        if status == ZOMBIE:
            self._on_zombie()
        if self.writer.failure is not None:  # a slot failed too: counted as failed
            raise self.writer.failure

    def steady_in(self, queue: str, seconds: float) -> bool:
        """May this process judge others dead in ``queue``'s slot: its beats there have
        succeeded without a break for ``seconds`` (``steadiness.py``)? A queue it does
        not beat in tells nothing of its slot (that shard may have been away): every
        slot it beats in must be steady then."""
        now = time.monotonic()
        if queue in self.writer.queues:
            return self.steadiness.steady(queue, seconds, now)
        return self.steadiness.all_steady([*self.writer.queues, None], seconds, now)

    def _note(self, now: float) -> None:
        """Record which slots this beat reached (``steadiness``); a beat that failed
        before reaching any slot counts as failed in every slot."""
        writer = self.writer
        failed = writer.failed
        if not failed and not writer.succeeded:
            failed = frozenset([*writer.queues, None])
        for slot in writer.succeeded:
            self.steadiness.succeeded(slot, now)
        for slot in failed:
            self.steadiness.failed(slot)
        if failed:
            self.last_failure = now

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cogworker-heartbeat",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception as exc:  # Redis away: keep trying; the TTL tells the rest
                self.streak.failed(exc)
                continue
            self.streak.succeeded()
            try:
                self.writer.write_workers(workers_entries(self._current_jobs()))
            except Exception as exc:  # dashboard only
                log.debug("couldn't write the workers hash: %s", why(exc))
