"""Registered jobs: what ``@jobs.job`` makes of a function, and its enqueue methods.

A payload can only ever run a function registered here: the worker looks the payload's
``class`` up in this registry and never imports anything a payload names. What a
registered job is (``JobDefinition``, ``JobOptions``) lives in ``definition``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Generic, ParamSpec, TypeVar, Unpack

from cogworker_async.enqueue.client import Client, Push
from cogworker_async.jobs import signature
from cogworker_async.jobs.definition import Delay, JobDefinition, JobOptions, When
from cogworker_async.jobs.groups import check_call_limit
from cogworker_async.jobs.keywords import JobKeywords, resolve
from cogworker_async.jobs.signature import Signature

P = ParamSpec("P")
R = TypeVar("R")


class Enqueuer(Generic[P]):
    """The enqueue methods of one job, with one set of options."""

    def __init__(self, client: Client, definition: JobDefinition, options: JobOptions) -> None:
        self._client = client
        self._definition = definition
        self._options = options

    def options(self, *, jid: str | None = None,
                **options: Unpack[JobKeywords]) -> Enqueuer[P]:
        """The same job with other options for the enqueues made through the result.

        Takes what ``@jobs.job(...)`` takes (``jobs/keywords.py``; ``None``: unchanged):
        ``queue``, ``retry`` (an int, a bool, or ``RetryPolicy(max=...)``), ``timeout``,
        ``keep_result`` (seconds its return value is kept), ``expires_in`` (seconds or a
        timedelta) or ``expires_at`` (an aware datetime or epoch seconds) — the job is
        not run if it has not started by then: dead as ``Expired``, or dropped with
        ``dead_on_expiry=False`` —, ``priority`` (-10 to 10, higher sooner), ``group``
        (a fair group's name, a function of the arguments naming it, or ``Group(...)``),
        ``dedup`` (``Unique(...)``, ``Throttle(s)``, ``Debounce(s)``, ``Coalesce()``, each
        with its ``key=``; it replaces the job's dedup), ``after`` (the jids it runs after,
        or ``After(jids, on_failure=..., pass_result=...)``), and the older flat spellings
        (``unique``, ``throttle``, ``debounce``, ``coalesce``, ``key``,
        ``on_parent_failure``, ``pass_result``...).

        Plus ``jid``: a jid of your own, for this call only (an idempotent enqueue: None
        while a job with that jid is alive); the decorator has none, since every enqueue
        would share it. A call cannot change what the worker reads from the job's
        registration: ``RetryPolicy``'s ``delay`` and ``discard_on``, or a new group
        limit (a ``ValueError`` says so)."""
        resolved = resolve(self._options, options, call=True)
        changed = resolved.options if jid is None else replace(resolved.options, jid=jid)
        check_call_limit(self._client.settings.group_limits, changed.queue,
                         resolved.group_limit)
        return Enqueuer(self._client, self._definition, changed)

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
        outbox writes it in the caller's transaction: ``outbox/__init__.py``)."""
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
