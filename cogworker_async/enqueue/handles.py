"""Registered jobs: what ``@jobs.job`` makes of a function, and its enqueue methods.

A payload can only ever run a function registered here: the worker looks the payload's
``class`` up in this registry and never imports anything a payload names. What a
registered job is (``JobDefinition``, ``JobOptions``) lives in ``definition``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Generic, ParamSpec, TypeVar

from cogworker_async.enqueue.client import Client, Push, epoch_from, seconds_from
from cogworker_async.jobs import signature
from cogworker_async.jobs.definition import Delay, JobDefinition, JobOptions, When
from cogworker_async.jobs.signature import Signature

P = ParamSpec("P")
R = TypeVar("R")


class Enqueuer(Generic[P]):
    """The enqueue methods of one job, with one set of options."""

    def __init__(self, client: Client, definition: JobDefinition, options: JobOptions) -> None:
        self._client = client
        self._definition = definition
        self._options = options

    def options(
        self, *, queue: str | None = None, retry: bool | int | None = None,
        timeout: float | None = None, keep_result: float | None = None,
        jid: str | None = None, expires_in: Delay | None = None,
        expires_at: When | None = None, dead_on_expiry: bool | None = None,
        after: Iterable[str] | None = None, on_parent_failure: str | None = None,
        pass_result: bool | None = None, priority: int | None = None,
        group: str | None = None, throttle: float | None = None,
        debounce: float | None = None, coalesce: bool | None = None, key: str | None = None,
    ) -> Enqueuer[P]:
        """The same job with other options for the enqueues made through the result:
        ``keep_result`` seconds to keep its return value; ``jid`` a jid of your own (an
        idempotent enqueue: None while a job with that jid is alive); ``expires_in``
        (seconds or a timedelta) or ``expires_at`` (an aware datetime or epoch seconds):
        the job is not run if it has not started by then — filed in dead as ``Expired``,
        or dropped with ``dead_on_expiry=False``; ``after`` the jids of jobs it runs
        after (it waits until each succeeded; ``on_parent_failure`` — ``cancel``,
        ``run``, ``dead`` — says what it does when one does not), ``pass_result`` (one
        parent) to take that parent's return value as its first argument; ``priority``
        from -10 to 10, higher runs sooner within its queue; ``group`` the fair group it
        waits in (groups of a queue are served in turn); ``throttle``, ``debounce`` (seconds)
        or ``coalesce`` to dedup enqueues by ``key`` (default: the arguments; ``dedup.py``)."""
        plain = {"queue": queue, "retry": retry, "timeout": timeout,
                 "keep_result": keep_result, "jid": jid, "dead_on_expiry": dead_on_expiry,
                 "on_parent_failure": on_parent_failure, "pass_result": pass_result,
                 "priority": priority, "group": group, "throttle": throttle,
                 "debounce": debounce, "coalesce": coalesce, "key": key}
        changes: dict[str, Any] = {name: value for name, value in plain.items()
                                   if value is not None}
        if after is not None:
            if isinstance(after, str | bytes):
                raise TypeError("after must be a list of jids, not one string")
            changes["after"] = tuple(after)
        if expires_in is not None and expires_at is not None:
            raise ValueError("give expires_in or expires_at, not both")
        if expires_in is not None:
            changes.update(expires_in=seconds_from(expires_in) if not isinstance(
                expires_in, int | float) or isinstance(expires_in, bool) else expires_in,
                expires_at=None)
        if expires_at is not None:
            changes.update(expires_at=epoch_from(expires_at, "expires_at"), expires_in=None)
        return Enqueuer(self._client, self._definition, replace(self._options, **changes))

    @property
    def definition(self) -> JobDefinition:
        return self._definition

    @property
    def job_options(self) -> JobOptions:
        """The options enqueues through this object use."""
        return self._options

    @property
    def namespace(self) -> str:
        """The App's namespace, where its jobs go (an outbox row carries it)."""
        return self._client.settings.namespace

    def s(self, /, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """This job and these arguments as a value (a batch's callback, a chain's link),
        checked now as an enqueue would check them."""
        return signature.make(self, args, kwargs, self._client.settings.max_payload_bytes)

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

    async def prepared(self, /, *args: P.args, **kwargs: P.kwargs) -> Push | None:
        """One run checked and built as ``enqueue`` would push it, not pushed (the
        outbox writes it in the caller's transaction: ``outbox.py``)."""
        return await self._client.prepare(self._definition, self._options, args, kwargs)

    def prepared_sync(self, /, *args: P.args, **kwargs: P.kwargs) -> Push | None:
        """``prepared`` for code that is not async."""
        return self._client.prepare_sync(self._definition, self._options, args, kwargs)

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

    def __call__(self, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = self._definition.func(*args, **kwargs)
        return result

    def __repr__(self) -> str:
        return f"<job {self.name} queue={self._options.queue!r} retry={self._options.retry!r}>"
