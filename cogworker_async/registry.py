"""Registered jobs: what ``@jobs.job`` makes of a function, and its enqueue methods.

A payload can only ever run a function registered here: the worker looks the payload's
``class`` up in this registry and never imports anything a payload names.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Generic, ParamSpec, TypeVar

from cogworker_async import unique as unique_module
from cogworker_async.settings import check_queue_name
from cogworker_async.unique import UniqueKey, UniquePolicy

if TYPE_CHECKING:
    from cogworker_async.client import Client

P = ParamSpec("P")
R = TypeVar("R")

Delay = float | int | timedelta
When = datetime | float | int


def check_retry(retry: object) -> bool | int:
    """``retry`` must be True, False or an int >= 0."""
    if isinstance(retry, bool):
        return retry
    if not isinstance(retry, int):
        raise TypeError(f"retry must be True, False or an int, not {type(retry).__name__}")
    if retry < 0:
        raise ValueError(f"retry must be >= 0, got {retry}")
    return retry


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Per-job defaults, overridable per enqueue with ``.options(...)``."""

    queue: str = "default"
    retry: bool | int = True
    timeout: float | None = None
    """Seconds a run may take before it fails with JobTimeout (None: no limit)."""
    unique: UniquePolicy | None = None
    unique_ttl: float = unique_module.DEFAULT_TTL

    def __post_init__(self) -> None:
        check_queue_name(self.queue)
        check_retry(self.retry)
        if self.timeout is not None:
            _seconds("timeout", self.timeout, MAX_TIMEOUT)
        unique_module.policy_of(self.unique)
        _seconds("unique_ttl", self.unique_ttl, unique_module.MAX_TTL)


MAX_TIMEOUT: Final = 366 * 24 * 3600.0
"""Longest job ``timeout`` (a year): anything longer is a typo, or no timeout (None)."""


def _seconds(name: str, value: object, cap: float) -> None:
    """A duration a job is declared with: a finite number of seconds in (0, cap]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not 0 < value <= cap:  # False for NaN too
        raise ValueError(f"{name} must be a number of seconds > 0 and <= {cap:,.0f}, "
                         f"got {value!r}")


RetryIn = Callable[[int, BaseException], float | None]
"""``retry_in(attempt, error)``: seconds before the next attempt, or None for the default."""


@dataclass(frozen=True, slots=True)
class JobDefinition:
    """A registered job: its name, function and defaults."""

    name: str
    func: Callable[..., Any]
    options: JobOptions
    unique_key: UniqueKey | None = None
    retry_in: RetryIn | None = None
    discard_on: tuple[type[BaseException], ...] = ()
    """Exceptions that send the job to dead at once, whatever its retries."""

    @property
    def is_async(self) -> bool:
        return _is_async(self.func)

    @property
    def signature(self) -> inspect.Signature | None:
        return _signature(self.func)

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise TypeError if ``args``/``kwargs`` don't fit the function."""
        # Whether arguments bind depends only on how many are positional and which
        # names are given: a shape that bound once binds again (checked on every
        # enqueue and every run, so remembered).
        shape = (self.func, len(args), frozenset(kwargs))
        if shape in _FITTING_SHAPES:
            return
        signature = self.signature
        if signature is None:
            return
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from None
        if len(_FITTING_SHAPES) < MAX_REMEMBERED_SHAPES:
            _FITTING_SHAPES.add(shape)


MAX_REMEMBERED_SHAPES: Final = 10_000
_FITTING_SHAPES: set[tuple[Callable[..., Any], int, frozenset[str]]] = set()


# Looked up on every enqueue and every run: computed once per function.
@functools.cache
def _signature(func: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):  # some builtins have none
        return None


@functools.cache
def _is_async(func: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(func)


class Enqueuer(Generic[P]):
    """The enqueue methods of one job, with one set of options."""

    def __init__(self, client: Client, definition: JobDefinition, options: JobOptions) -> None:
        self._client = client
        self._definition = definition
        self._options = options

    def options(
        self, *, queue: str | None = None, retry: bool | int | None = None,
        timeout: float | None = None,
    ) -> Enqueuer[P]:
        """The same job with other options for the enqueues made through the result."""
        changes: dict[str, Any] = {}
        if queue is not None:
            changes["queue"] = queue
        if retry is not None:
            changes["retry"] = retry
        if timeout is not None:
            changes["timeout"] = timeout
        return Enqueuer(self._client, self._definition, replace(self._options, **changes))

    async def enqueue(self, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Enqueue one run now; returns its jid (None: a unique job's duplicate)."""
        return await self._client.enqueue(self._definition, self._options, args, kwargs)

    async def enqueue_in(self, delay: Delay, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Enqueue one run ``delay`` seconds (or a timedelta) from now."""
        return await self._client.enqueue(
            self._definition, self._options, args, kwargs, delay=delay
        )

    async def enqueue_at(self, when: When, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Enqueue one run at ``when``: an aware datetime, or epoch seconds."""
        return await self._client.enqueue(self._definition, self._options, args, kwargs, at=when)

    async def enqueue_many(
        self, calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]
    ) -> list[str | None]:
        """Enqueue many runs in one round trip: ``[(args, kwargs), ...]``; returns jids
        (None for a unique job's duplicate)."""
        return await self._client.enqueue_many(self._definition, self._options, calls)

    def enqueue_sync(self, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """``enqueue`` for code that is not async (scripts, sync web frameworks)."""
        return self._client.enqueue_sync(self._definition, self._options, args, kwargs)


class JobFunction(Enqueuer[P], Generic[P, R]):
    """A function registered as a job. Calling it calls the function directly."""

    def __init__(self, client: Client, definition: JobDefinition) -> None:
        super().__init__(client, definition, definition.options)
        self.__wrapped__ = definition.func
        self.__doc__ = definition.func.__doc__
        self.__name__ = getattr(definition.func, "__name__", definition.name)

    @property
    def name(self) -> str:
        """The registered name, which payloads carry in ``class``."""
        return self._definition.name

    @property
    def definition(self) -> JobDefinition:
        return self._definition

    def __call__(self, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = self._definition.func(*args, **kwargs)
        return result

    def __repr__(self) -> str:
        return f"<job {self.name} queue={self._options.queue!r} retry={self._options.retry!r}>"


AsyncJob = JobFunction[P, Awaitable[R]]
