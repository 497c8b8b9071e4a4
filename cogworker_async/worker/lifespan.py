"""Worker lifespan: what a worker process sets up before its first job and tears down
after its last (a database pool, an HTTP client), shared by every job it runs.

    @jobs.lifespan
    async def resources():
        async with httpx.AsyncClient() as http:
            yield {"http": http}          # what jobs read as current_job().state

Entered in each worker process (each child of ``run --processes``, and a worker embedded
with ``jobs.worker()``) before the worker registers or fetches anything: if entering
raises, the worker stops with that error, having taken no job; a signal while it is
entered cancels the entry (``run``: ``cli/starting.py``). Exited after the last job has
settled, on a graceful and on a hard stop, shielded from cancellation and bounded by
``EXIT_TIMEOUT``; an exit that raises is ``LifespanExitFailed`` (``run``: exit 5). (A
plain-function job whose thread outlived its timeout or the shutdown deadline cannot be
stopped: it may still be using what the lifespan made when the exit runs.) Jobs run in
tasks (and, plain functions, threads) started inside it, so they read what it yielded
through a context variable, as they read ``current_job()``. The testing helpers enter it
around a ``drain()`` and an inline run.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, Final, TypeVar

import anyio

from cogworker_async.errors import LifespanExitFailed, LifespanFailed, why
from cogworker_async.jobs.context import LIFESPAN_STATE as STATE

log = logging.getLogger(__name__)

EXIT_TIMEOUT: Final = 30.0
"""Seconds a lifespan's exit may take once the worker has stopped (a pool that hangs on
close must not keep a stopping process alive for good)."""

Lifespan = Callable[[], AbstractAsyncContextManager[Any]]
"""``@jobs.lifespan``'s function, as an async context manager factory."""
LifespanFunction = TypeVar("LifespanFunction", bound=Callable[[], Any])
"""What ``@jobs.lifespan`` decorates (and returns as it was)."""

NO_STATE: Final = None

_entering = 0
"""How many lifespans this process is entering right now (``entering``)."""


def entering() -> bool:
    """Is a lifespan being entered in this process (its worker not started yet)? What
    ``run`` asks of a signal that comes while the worker starts: a lifespan that hangs
    as it is entered is cancelled (``cli/starting.py``); past it, the worker is stopped
    as soon as it runs."""
    return _entering > 0



def lifespan_of(func: object) -> Lifespan:
    """``@jobs.lifespan``'s argument as a context manager factory: an async generator
    function (one ``yield``), or a function returning an async context manager; a
    TypeError otherwise."""
    if inspect.isasyncgenfunction(func):
        return asynccontextmanager(func)
    if callable(func) and not inspect.iscoroutinefunction(func) \
            and not inspect.isgeneratorfunction(func):
        return func  # checked when entered
    raise TypeError("jobs.lifespan takes an async generator function (async def ...: "
                    f"... yield state ...), not {func!r}")


@asynccontextmanager
async def entered(lifespan: Lifespan | None) -> AsyncIterator[Any]:
    """``lifespan`` entered for the block, its state in ``STATE`` for the tasks started
    inside; exited after the block, shielded and bounded. None: nothing to enter."""
    if lifespan is None:
        yield NO_STATE
        return
    manager = lifespan()
    if not hasattr(manager, "__aenter__"):
        raise TypeError(f"jobs.lifespan: {lifespan!r} returned {manager!r}, not an async "
                        "context manager")
    stack = AsyncExitStack()
    global _entering
    _entering += 1
    try:
        state = await stack.enter_async_context(manager)
    except Exception as exc:
        raise LifespanFailed(f"the worker's lifespan failed as it was entered, so the "
                             f"worker took no job: {type(exc).__name__}: {exc}") from exc
    finally:
        _entering -= 1
    token = STATE.set(state)
    worked = False
    try:
        yield state
        worked = True
    finally:
        STATE.reset(token)
        with anyio.move_on_after(EXIT_TIMEOUT, shield=True) as bounded:
            try:
                await stack.aclose()
            except Exception as exc:
                # After a worker that failed, its own error is the one to tell: this
                # one is logged. After a worker that stopped, this is the error.
                if not worked:
                    log.error("the lifespan's exit raised too: %s", why(exc))
                else:
                    raise LifespanExitFailed(
                        "the worker's lifespan raised as it was exited (the worker had "
                        f"stopped, its jobs settled): {why(exc)}") from exc
        if bounded.cancelled_caught:
            log.error("the lifespan's exit took over %.0fs: left unfinished", EXIT_TIMEOUT)
