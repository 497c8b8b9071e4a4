"""Hooks: the application's ``@jobs.on_failure`` and ``@jobs.on_death`` functions.

    @jobs.on_failure
    async def report(job: JobContext, error: BaseException) -> None:
        sentry_sdk.capture_exception(error)

    @jobs.on_death
    async def page(death: Death) -> None:
        await pager.send(f"{death.name} {death.jid} is dead: {death.reason}")

``on_failure`` hears every failed run (it will be retried, or it is dead); ``on_death``
every job that lands in dead in this process — a run out of retries or discarded, a job
that cannot run (unknown, bad arguments, unreadable payload) and a repeat orphan this
process buried as ``ProcessDied``.

A hook never touches a job's settlement: the processor reports the outcome
(``observers.py``) and goes on to settle it; the call only joins a bounded buffer that
``HOOK_WORKERS`` tasks drain. Each call gets ``HOOK_TIMEOUT`` seconds (a plain function
runs in a thread and is abandoned, not killed, at its timeout); one that raises is
logged. When the buffer is full (hooks far slower than jobs fail) further calls are
dropped and counted, and the log says so: memory stays bounded. Calls still buffered
when the worker stops are dropped (best effort, like any notification).
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import anyio

from cogworker_async.context import JobContext
from cogworker_async.worker.observers import Death, RunReport, death_of

log = logging.getLogger(__name__)

HOOK_TIMEOUT: Final = 10.0
"""Seconds one hook call may take."""
HOOK_WORKERS: Final = 4
"""Hook calls run at once."""
HOOK_BUFFER: Final = 1_000
"""Calls waiting at most; more are dropped (and counted)."""

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
        self._ready = anyio.Event()

    # -- observer side (on the hot path: queue only) -------------------------------------

    def finished(self, report: RunReport) -> None:
        if report.error is not None and report.context is not None:
            for failure_hook in self.hooks.on_failure:
                self._queue(failure_hook, (report.context, report.error))
        death = death_of(report)
        if death is not None:
            self.died(death)

    def died(self, death: Death) -> None:
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
            await self.call(hook, args)

    async def call(self, hook: Callable[..., Any], args: Sequence[Any]) -> None:
        """One bounded call; whatever it raises is logged."""
        try:
            with anyio.fail_after(self.timeout):
                if _is_async(hook):
                    await hook(*args)
                else:
                    # A thread cannot be cancelled: abandoned at the timeout, it runs on.
                    await anyio.to_thread.run_sync(partial(hook, *args),
                                                   abandon_on_cancel=True)
        except TimeoutError:
            log.error("hook %s ran over %.0fs: abandoned", _name(hook), self.timeout)
        except Exception:
            log.exception("hook %s failed", _name(hook))


def _is_async(hook: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(
        getattr(hook, "__call__", None))  # noqa: B004 - an async __call__ counts


def _name(hook: Callable[..., Any]) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)
