"""What the App hands out around a worker and a registration: the ``Worker`` a host
drives (``async with jobs.worker() as worker``), and the decorator ``@jobs.job(...)``
returns. Protocols only: the Manager is the worker, ``App.job`` the decorator."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, Protocol, TypeVar

from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.settings import Settings

P = ParamSpec("P")
R = TypeVar("R")


class JobDecorator(Protocol):
    """What ``@jobs.job(...)`` returns: registers the function it is applied to."""

    def __call__(self, func: Callable[P, R], /) -> JobFunction[P, R]: ...


class Worker(Protocol):
    """A running worker, as ``async with jobs.worker() as worker`` hands it out: what a
    host (the CLI, a lifespan, a test) needs to stop it and to know how it stopped."""

    @property
    def identity(self) -> str:
        """This process's name in Redis (its beats, its in-progress list)."""
        ...

    @property
    def settings(self) -> Settings:
        """The settings it runs with (the App's, with ``worker(**overrides)`` applied)."""
        ...

    @property
    def stopping(self) -> bool:
        """``stop()`` or ``hard_stop()`` was called."""
        ...

    @property
    def stopped_hard(self) -> bool:
        """It stopped at once (``hard_stop()``): running jobs were cancelled and given back."""
        ...

    def stop(self) -> None:
        """Fetch nothing more; running jobs get ``shutdown_timeout`` seconds, then are
        cancelled and given back."""

    def hard_stop(self) -> None:
        """Stop now: running jobs are cancelled and given back."""

    async def wait_stopped(self) -> None:
        """Return once it has stopped (after a stop and the hand-over of its jobs)."""
