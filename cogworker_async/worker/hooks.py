"""Hooks: the application's ``@jobs.on_failure`` and ``@jobs.on_death`` functions.

    @jobs.on_failure
    async def report(job: JobContext, error: BaseException) -> None:
        sentry_sdk.capture_exception(error)

    @jobs.on_death
    async def page(death: Death) -> None:
        await pager.send(f"{death.name} {death.jid} is dead: {death.reason}")

``on_failure`` hears every failed run (it will be retried — a ``raise Retry(...)`` too —
or it is dead); ``on_death``
every job that lands in dead in this process — a run out of retries or discarded, a job
that cannot run (unknown, bad arguments, unreadable payload) and a repeat orphan this
process buried as ``ProcessDied``.

A hook never touches a job's settlement: the processor reports the outcome
(``observers.py``) and goes on to settle it; the call only joins a bounded buffer that
``HOOK_WORKERS`` tasks drain. Each call gets ``HOOK_TIMEOUT`` seconds (a plain function
runs in a thread and is abandoned, not killed, at its timeout); one that raises is
logged. When the buffer is full (hooks far slower than jobs fail) further calls are
dropped and counted, and the log says so: memory stays bounded. At a graceful stop the
worker lets the buffered calls finish once its jobs have, within what is left of
``shutdown_timeout`` and at most ``HOOK_DRAIN`` seconds (a deploy right after a failure
still reports it); calls left then, or at a hard stop, are dropped and the log says so.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from cogworker_async.jobs.context import JobContext
from cogworker_async.worker.observers import Death, RunReport, death_of

log = logging.getLogger(__name__)

HOOK_TIMEOUT: Final = 10.0
"""Seconds one hook call may take."""
HOOK_WORKERS: Final = 4
"""Hook calls run at once."""
HOOK_BUFFER: Final = 1_000
"""Calls waiting at most; more are dropped (and counted)."""
HOOK_THREADS: Final = HOOK_WORKERS
"""Plain hook calls whose thread still runs (abandoned ones included), at most."""
HOOK_DRAIN: Final = 5.0
"""Seconds a graceful stop waits, at most, for buffered hook calls (``HookRunner.drain``)."""

FailureHook = Callable[[JobContext, BaseException], Any]
"""``(job, error)``: async or plain."""
DeathHook = Callable[[Death], Any]
"""``(death)``: async or plain."""


@dataclass(slots=True)
class Hooks:
    """The hooks an App registered."""

    on_failure: list[FailureHook] = field(default_factory=list)
    on_death: list[DeathHook] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.on_failure or self.on_death)


class HookRunner:
    """An observer that queues hook calls, and the tasks that make them."""

    def __init__(self, hooks: Hooks, *, timeout: float = HOOK_TIMEOUT,
                 buffer: int = HOOK_BUFFER) -> None:
        self.hooks = hooks
        self.timeout = timeout
        self.buffer = buffer
        self.dropped = 0
        self._calls: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._threads = threading.BoundedSemaphore(HOOK_THREADS)
        self._ready = anyio.Event()
        self._calling = 0
        """Calls taken from the buffer and not yet returned."""
        self._quiet = anyio.Event()
        """Set when the buffer is empty and no call is being made."""

    # -- observer side (on the hot path: queue only) -------------------------------------

    def finished(self, report: RunReport) -> None:
        context = report.context
        if report.error is not None and context is not None and self.hooks.on_failure:
            # A copy: the job's payload is also what its retry or dead entry is built
            # from, re-encoded at each settle attempt — a hook that scrubs a field must
            # not change what is filed.
            context = dataclasses.replace(context, payload=_detached(context.payload))
            for failure_hook in self.hooks.on_failure:
                self._queue(failure_hook, (context, report.error))
        if self.hooks.on_death:
            death = death_of(report)
            if death is not None:
                self.died(death)

    def died(self, death: Death) -> None:
        if not self.hooks.on_death:
            return
        death = dataclasses.replace(death, entry=_detached(death.entry))  # as above
        for death_hook in self.hooks.on_death:
            self._queue(death_hook, (death,))

    def _queue(self, hook: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if len(self._calls) >= self.buffer:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % self.buffer == 0:
                log.warning("hooks are behind: %d call(s) dropped so far (%s)", self.dropped,
                            _name(hook))
            return
        self._calls.append((hook, args))
        self._ready.set()

    # -- the tasks ------------------------------------------------------------------------

    async def run(self) -> None:
        """Make the queued calls until cancelled (``HOOK_WORKERS`` at once)."""
        async with anyio.create_task_group() as group:
            for _ in range(HOOK_WORKERS):
                group.start_soon(self._drain)

    async def _drain(self) -> None:
        while True:
            if not self._calls:
                if self._ready.is_set():
                    self._ready = anyio.Event()
                await self._ready.wait()
                continue
            hook, args = self._calls.popleft()
            self._calling += 1
            try:
                await self.call(hook, args)
            finally:
                self._calling -= 1
                if not self._calls and not self._calling:
                    self._quiet.set()

    async def drain(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the buffered calls to be made (a graceful stop);
        say how many were left."""
        with anyio.move_on_after(seconds):
            while self._calls or self._calling:
                self._quiet = anyio.Event()
                await self._quiet.wait()
        left = len(self._calls) + self._calling
        if left:
            log.warning("stopping with %d hook call(s) not made", left)

    async def call(self, hook: Callable[..., Any], args: Sequence[Any]) -> None:
        """One bounded call; whatever it raises is logged (``SystemExit`` too: as for a
        job, a hook never ends the worker)."""
        try:
            with anyio.move_on_after(self.timeout) as scope:
                if _is_async(hook):
                    await hook(*args)
                else:
                    await self._in_thread(hook, args)
        except (Exception, SystemExit):
            log.exception("hook %s failed", _name(hook))
            return
        if scope.cancelled_caught:
            log.error("hook %s ran over %.0fs: abandoned", _name(hook), self.timeout)

    async def _in_thread(self, hook: Callable[..., Any], args: Sequence[Any]) -> None:
        """A plain hook in a thread. A thread cannot be cancelled: abandoned at the
        timeout, it runs on — so at most ``HOOK_THREADS`` may still run, abandoned ones
        counted; past that the call is dropped (and logged), rather than a thread leaked
        per call until the process can make no more (its jobs' and heartbeat's too)."""
        if not self._threads.acquire(blocking=False):
            self.dropped += 1
            log.error("hook %s not called: %d earlier calls of plain hooks still run in "
                      "their threads", _name(hook), HOOK_THREADS)
            return
        lock, state = threading.Lock(), ["queued"]

        def run() -> None:
            with lock:
                if state[0] == "gone":  # abandoned before it began (released below)
                    return
                state[0] = "running"
            try:
                hook(*args)
            finally:
                self._threads.release()

        try:
            await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
        finally:
            with lock:
                if state[0] == "queued":
                    state[0] = "gone"
                    self._threads.release()


def _detached(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a payload (a JSON round trip for what a middleware put there and
    ``deepcopy`` refuses)."""
    try:
        return copy.deepcopy(value)
    except Exception:
        detached: dict[str, Any] = json.loads(json.dumps(value, default=repr))
        return detached


def _is_async(hook: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(
        getattr(hook, "__call__", None))  # noqa: B004 - an async __call__ counts


def _name(hook: Callable[..., Any]) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)


def check_hook(kind: str, hook: object) -> None:
    """A hook given to the App (``on_failure``, ``on_death``): a function, or a TypeError."""
    if not callable(hook):
        raise TypeError(f"{kind} takes a function, not {type(hook).__name__}")
