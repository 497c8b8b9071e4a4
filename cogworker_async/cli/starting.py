"""Starting: what SIGTERM/SIGINT do to ``run`` while its worker starts — above all while
its lifespan (``@jobs.lifespan``) is being entered, which may hang (a database that does
not answer, a connect with no timeout).

The worker's own handling of signals (the first stops it gracefully, a second at once)
begins once it runs. Before that:

- the first signal cancels the lifespan's entry (``Desk``, in the event loop: the
  lifespan sees a cancel where it waits, and its cleanup runs), and ``run`` exits 0,
  having registered nothing and taken no job; one that comes after the lifespan was
  entered stops the worker as soon as it runs (``Desk.started``), as before;
- whatever the start is doing, the process exits 1 (``EXIT_HARD_STOP``) if it has not
  started or ended ``bound`` seconds (``shutdown_timeout``) after the first signal — a
  lifespan that shields itself from the cancel, or blocks the event loop so that the
  cancel never reaches it — saying so in one ``error:`` line;
- a second signal while the lifespan is still being entered exits 1 at once, saying so.

The bound and the second signal are kept by ``StartGuard``, a Python-level signal
handler and a timer thread, not by the event loop: a lifespan blocking the loop would
hold those too. (A signal handler runs in the main thread between two bytecodes, even
while a synchronous call there waits: the call is interrupted, then resumed.) The
event loop still hears every signal: its wake-up file descriptor is written by the
interpreter's C handler, whatever Python handler is installed. Exiting at once loses
nothing: the lifespan is entered before the worker registers or fetches anything.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable
from types import FrameType, TracebackType
from typing import Any, Final

import anyio

from cogworker_async.cli.exits import EXIT_HARD_STOP
from cogworker_async.running import Worker
from cogworker_async.worker import lifespan

log = logging.getLogger("cogworker_async.cli")

SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


def _exit_now(message: str) -> None:
    """One ``error:`` line, then exit 1 without unwinding (safe in a signal handler and
    in a thread: no lock is taken, no thread joined)."""
    os.write(2, f"error: {message}\n".encode())
    os._exit(EXIT_HARD_STOP)


class StartGuard:
    """While the worker starts: the bound after a first signal, and a second signal
    while the lifespan is still being entered (see the module docstring). Entered in the
    main thread after the event loop's signal receiver is open; ``disarm()`` once the
    worker runs (or the start has ended)."""

    def __init__(self, bound: float, *, exit_now: Callable[[str], None] = _exit_now) -> None:
        self.bound = bound
        self._exit_now = exit_now
        self._previous: dict[int, Any] = {}
        self._signals = 0
        self._timer: threading.Timer | None = None
        self._armed = False
        self._lock = threading.Lock()

    def __enter__(self) -> StartGuard:
        for signum in SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)
        self._armed = True
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.disarm()

    def disarm(self) -> None:
        """The worker runs (or its start ended): its own handling of signals applies."""
        with self._lock:
            if not self._armed:
                return
            self._armed = False
            if self._timer is not None:
                self._timer.cancel()
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signum)
        if callable(previous):  # the event loop's own (a no-op: it reads its fd)
            previous(signum, frame)
        name = signal.Signals(signum).name
        self._signals += 1
        if self._signals == 1:
            if lifespan.entering():
                log.warning("%s while the worker's lifespan is being entered: cancelling "
                            "its entry (the process exits within %gs; signal again to "
                            "exit now)", name, self.bound)
            timer = threading.Timer(self.bound, self._give_up, args=(name,))
            timer.daemon = True
            with self._lock:
                if not self._armed:
                    return
                self._timer = timer
            timer.start()
        elif lifespan.entering():
            self._exit_now(f"{name} again while the worker's lifespan was being entered: "
                           "exiting now (no job was taken)")

    def _give_up(self, name: str) -> None:
        with self._lock:
            if not self._armed:
                return
        what = ("its lifespan was still being entered" if lifespan.entering()
                else "the worker had not started nor stopped")
        self._exit_now(f"{what} {self.bound:g}s after {name} (shutdown_timeout): exiting "
                       "now (no job was taken)")


class Desk:
    """The event loop's side of the signals while the worker starts and runs: before it
    runs, the first cancels the lifespan's entry (``start``, the scope around the
    start) or waits for it to run; once it runs, the first stops it gracefully, a
    second at once."""

    def __init__(self, signals: AsyncIterator[int]) -> None:
        self.signals = signals
        self.start = anyio.CancelScope()
        """Around the worker's start: cancelled by a signal while its lifespan is being
        entered."""
        self.worker: Worker | None = None
        self._pending: list[int] = []

    @property
    def stopped_starting(self) -> bool:
        """A signal cancelled the start: the worker never ran."""
        return self.start.cancelled_caught

    def started(self, worker: Worker) -> None:
        """The worker runs: signals that came meanwhile stop it now."""
        self.worker = worker
        for signum in self._pending:
            self._stop(worker, signum)
        self._pending.clear()

    async def watch(self) -> None:
        async for signum in self.signals:
            if self.worker is not None:
                self._stop(self.worker, signum)
            elif lifespan.entering():  # StartGuard said so, and keeps the bound
                self.start.cancel()
            else:
                self._pending.append(signum)

    @staticmethod
    def _stop(worker: Worker, signum: int) -> None:
        name = signal.Signals(signum).name
        if not worker.stopping:
            log.info("%s: stopping (jobs get %.0fs; signal again to stop at once)",
                     name, worker.settings.shutdown_timeout)
            worker.stop()
        else:
            log.warning("%s again: stopping now", name)
            worker.hard_stop()
