"""App: the settings, the registry of jobs and the entry points (decorators, enqueue,
worker). Users define one per application and import it from both sides:

    jobs = App(queues=["critical", "default"])

    @jobs.job(retry=5)
    async def send_email(to: str) -> None: ...

    await send_email.enqueue("a@example.com")        # from the web app
    async with jobs.worker(): ...                     # in a lifespan, or the CLI
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import tzinfo
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar, Unpack, overload

import anyio

from cogworker_async import environment, logs
from cogworker_async.enqueue.app_queues import AppQueues
from cogworker_async.enqueue.client import Client
from cogworker_async.enqueue.handles import JobFunction
from cogworker_async.errors import LIFESPAN_ERRORS, ConfigurationError
from cogworker_async.jobs.definition import Delay, JobDefinition, JobOptions
from cogworker_async.jobs.groups import with_limit
from cogworker_async.jobs.keywords import JobKeywords, resolve
from cogworker_async.jobs.periodic import Periodic, parse_tz
from cogworker_async.jobs.retries import RetryPolicy
from cogworker_async.jobs.signature import Signature
from cogworker_async.jobs.status import CancelOutcome, JobStatus
from cogworker_async.limits.limiter import DEFAULT_LEASE, Limiter, check_name, spec_of
from cogworker_async.middleware import ClientMiddleware, ServerMiddleware
from cogworker_async.redis import urls
from cogworker_async.redis.embedded import EmbeddedServer
from cogworker_async.redis.pausing import Pause
from cogworker_async.redis.store import Store, dead_limits_of, durability_of
from cogworker_async.running import JobDecorator
from cogworker_async.running import Worker as Worker  # re-exported: hosts import it here
from cogworker_async.settings import Settings
from cogworker_async.wiring import WIRING
from cogworker_async.worker.hooks import DeathHook, FailureHook, Hooks, check_hook
from cogworker_async.worker.lifespan import Lifespan, LifespanFunction, lifespan_of
from cogworker_async.worker.manager import Manager
from cogworker_async.workflows.app_batches import AppBatches
from cogworker_async.workflows.batch import Batch, BatchBackend, BatchStatus
from cogworker_async.workflows.chain import Chain

if TYPE_CHECKING:
    from cogworker_async.testing import Testing

P = ParamSpec("P")
R = TypeVar("R")

PERIODIC_FIELDS: Final = ("name", "schedule", "tz", "next_run", "last_run")
_store_warned = False  # App.store()'s DeprecationWarning: once a process
"""What ``App.periodic_jobs`` tells of each periodic job (``Inspector.periodic`` tells
more: its queue, and whether it runs now)."""

class App:
    """One application's jobs and how to reach their Redis.

    ``App(redis_url=None, **settings)``: every keyword is a field of ``Settings``
    (``namespace``, ``queues``, ``concurrency``, ``shutdown_timeout``, ...). With no URL
    (and no ``$COGWORKER_REDIS_URL``) the embedded server is used.
    """

    def __init__(
        self, redis_url: str | None = None, *, settings: Settings | None = None, **options: Any
    ) -> None:
        base = settings or Settings()
        self.settings = dataclasses.replace(base, redis_url=redis_url or base.redis_url,
                                            **options)
        self.registry: dict[str, JobDefinition] = {}
        self.periodics: dict[str, Periodic] = {}
        self.limiters: dict[str, Limiter] = {}
        self.client_middleware: list[ClientMiddleware] = []
        self.server_middleware: list[ServerMiddleware] = []
        self.hooks = Hooks()
        self._lifespan: Lifespan | None = None
        self._url: str | None = None
        self._url_lock = threading.Lock()
        self._embedded: EmbeddedServer | None = None
        self._client = Client(self.settings, self.redis_url, self.client_middleware,
                              self._own_queues)

    def _own_queues(self) -> set[str]:
        """The App's queues: declared (``App(queues=...)``), the default, and each
        registered job's. An enqueue elsewhere is warned about (a typo?)."""
        settings = self.settings
        return {settings.default_queue, *settings.queue_names,
                *(definition.options.queue for definition in self.registry.values())}

    # -- registering jobs -------------------------------------------------------------

    @overload
    def job(self, func: Callable[P, R], /) -> JobFunction[P, R]: ...

    @overload
    def job(self, /, *, name: str | None = None,
            **options: Unpack[JobKeywords]) -> JobDecorator: ...

    def job(self, func: Callable[..., Any] | None = None, /, *, name: str | None = None,
            **options: Unpack[JobKeywords]) -> Any:
        """Register a function as a job (``@jobs.job`` or ``@jobs.job(queue=..., ...)``).

        ``name``: the registered name (default ``module.qualname``). Every other keyword
        is one ``.options()`` takes too (``jobs/keywords.py``): ``queue`` (default
        "default", or the App's first queue), ``retry`` (True: 25 retries, False, how
        many, or ``RetryPolicy(max=, delay=, discard_on=)``), ``timeout``,
        ``keep_result``, ``expires_in``/``expires_at``/``dead_on_expiry``, ``priority``
        (-10 to 10, higher sooner), ``group`` (a name, ``fn(*args, **kwargs)``, or
        ``Group(key, limit=n)``, ``limit`` being the queue's group limit: ``jobs/groups.py``),
        ``dedup`` (``Unique(...)``, ``Throttle(s)``, ``Debounce(s)``, ``Coalesce()``),
        ``after``, and the older flat spellings (``unique``, ``unique_ttl``,
        ``unique_key``, ``retry_in``, ``discard_on``, ``throttle``...). No ``jid=``: a
        jid names one enqueue (``.options(jid=...)``)."""
        resolved = resolve(JobOptions(queue=self.settings.default_queue), options, call=False)
        queue, limit = resolved.options.queue, resolved.group_limit
        with_limit(self.settings.group_limits, queue, limit)  # a conflict: refused here

        def register(function: Callable[..., Any]) -> JobFunction[..., Any]:
            job_name = name or f"{function.__module__}.{function.__qualname__}"
            existing = self.registry.get(job_name)
            if existing is not None and existing.func is not function:
                raise ConfigurationError(f"two jobs are registered as {job_name!r}")
            # Declared by a registration that holds only (a refused one limits nothing).
            limits = with_limit(self.settings.group_limits, queue, limit)
            if limits != self.settings.group_limits:  # the workers read the App's limits
                self.settings = self._client.settings = dataclasses.replace(
                    self.settings, group_limits=limits)
            definition = resolved.definition(job_name, function)
            self.registry[job_name] = definition
            return JobFunction(self._client, definition)

        return register(func) if func is not None else register

    def periodic(
        self,
        schedule: str,
        /,
        *,
        tz: str | tzinfo | None = None,
        name: str | None = None,
        queue: str | None = None,
        retry: bool | int | RetryPolicy = False,
        timeout: Delay | None = None,
        expires_in: Delay | None = None,
        run_at_startup: bool = False,
    ) -> JobDecorator:
        """Register a job enqueued on a cron ``schedule`` (five fields, or six with
        seconds last), once per tick across all processes, never two runs at once.
        ``tz``: the schedule's timezone (default UTC). The function takes no arguments.
        ``expires_in``: a tick not started within this many seconds is skipped (dead
        as ``Expired``), e.g. after a backlog or a pause. ``run_at_startup``: also run
        once when the workers start (processes starting within a minute share one run).
        """

        def register(function: Callable[P, R]) -> JobFunction[P, R]:
            registered: JobFunction[P, R] = self.job(name=name, queue=queue, retry=retry,
                                                     timeout=timeout,
                                                     expires_in=expires_in)(function)
            definition = registered.definition
            signature = definition.signature
            if signature is not None:
                try:
                    signature.bind()
                except TypeError:
                    raise TypeError(f"periodic job {definition.name} must take no "
                                    "required arguments") from None
            self.periodics[definition.name] = Periodic(definition.name, schedule,
                                                       parse_tz(tz), run_at_startup)
            return registered

        return register

    def limiter(self, name: str, /, *, concurrent: int | None = None,
                per_window: tuple[int, float] | None = None,
                bucket: tuple[int, float] | None = None, wait: float = 0.0,
                lease: float = DEFAULT_LEASE) -> Limiter:
        """A limiter shared by every process of this App (``limits/limiter.py``), used in async
        job code as ``async with limiter:``. Exactly one of:

        - ``concurrent=N``: at most N holders at once; a slot lives as long as its
          holder's process (a SIGKILLed one's is free again within ``orphan_threshold``);
        - ``per_window=(N, seconds)``: at most N acquisitions per fixed window;
        - ``bucket=(N, seconds)``: a token bucket of N tokens, refilled over ``seconds``.

        ``wait``: seconds to wait for a slot or token before raising ``OverLimit`` (a
        job that raises it is rescheduled, not failed: ``max_limit_reschedules``).
        ``lease``: how long a concurrent slot taken outside any worker is held at most.
        A plain-function job cannot use one. The same name again with the same settings
        gives the same limiter; with others, ``ConfigurationError``."""
        spec = spec_of(concurrent, per_window, bucket)
        existing = self.limiters.get(check_name(name))
        if existing is not None:
            if not existing.same_as(spec, wait, lease):
                raise ConfigurationError(f"limiter {name!r} is already defined as "
                                         f"{existing!r}")
            return existing
        made = self.limiters[name] = Limiter(  # the backend of each entry: a fake block's
            name, spec, wait=wait, lease=lease,
            store=lambda: self._client.backend.limit_store())
        return made

    def add_client_middleware(self, middleware: ClientMiddleware) -> None:
        """Add ``async def mw(enqueue, call_next) -> str | None`` around every enqueue."""
        self.client_middleware.append(middleware)

    def add_server_middleware(self, middleware: ServerMiddleware) -> None:
        """Add ``async def mw(job_context, call_next) -> None`` around every run."""
        self.server_middleware.append(middleware)

    def lifespan(self, func: LifespanFunction, /) -> LifespanFunction:
        """Register the workers' lifespan: an async generator function that sets up what
        jobs share and yields it (``current_job().state``), entered in each worker
        process before it takes a job, exited after its last (``worker/lifespan.py``)."""
        if self._lifespan is not None:
            raise ConfigurationError("an App has one lifespan: enter several resources "
                                     "in it (contextlib.AsyncExitStack)")
        self._lifespan = lifespan_of(func)
        return func

    def on_failure(self, hook: FailureHook, /) -> FailureHook:
        """Register ``hook(job, error)`` (async or plain), called after every failed run in
        a worker of this App: the job's context (``JobContext``) and what it raised —
        for Sentry, paging, metrics. It runs apart from the job's settlement, bounded by
        ``HOOK_TIMEOUT`` seconds; what it raises is logged (``worker/hooks.py``)."""
        check_hook("on_failure", hook)
        self.hooks.on_failure.append(hook)
        return hook

    def on_death(self, hook: DeathHook, /) -> DeathHook:
        """Register ``hook(death)`` (async or plain), called when a worker of this App
        files a job in dead: out of retries, discarded, impossible to run (unknown job,
        bad arguments, unreadable payload) or buried as ``ProcessDied``. ``death`` is a
        ``Death`` (jid, name, queue, reason, message, the dead entry)."""
        check_hook("on_death", hook)
        self.hooks.on_death.append(hook)
        return hook

    async def periodic_jobs(self) -> list[dict[str, Any]]:
        """Each periodic job: name, schedule, timezone, next run and last run (epoch s;
        last run None before the first tick). ``Inspector(app).periodic`` tells more."""
        from cogworker_async.admin.periodic import periodic_infos  # a worker never asks

        return [{name: getattr(info, name) for name in PERIODIC_FIELDS}
                for info in await periodic_infos(self)]

    # -- enqueueing -------------------------------------------------------------------

    async def enqueue(self, name: str, /, *args: Any, **kwargs: Any) -> str | None:
        """Enqueue a registered job by name; returns its jid (None: a unique duplicate)."""
        definition = self.registry.get(name)
        if definition is None:
            raise ValueError(f"no job is registered as {name!r} in this App")
        return await self._client.enqueue(definition, definition.options, args, kwargs)

    @cached_property
    def testing(self) -> Testing:
        """Helpers for tests, with no Redis (``cogworker_async.testing``): ``with
        jobs.testing.fake():`` records enqueues, ``enqueued()`` lists them, ``await
        jobs.testing.drain()`` runs them; ``with jobs.testing.inline():`` runs each at once."""
        from cogworker_async.testing import Testing  # only where tests ask for it

        return Testing(self.registry, self.settings, self._client, self.server_middleware,
                       self.hooks, lambda: self._lifespan)

    # -- jobs as values -----------------------------------------------------------------

    async def status(self, jid: str, *, queue: str | None = None) -> JobStatus:
        """What became of job ``jid``: a ``JobStatus`` (state, queue, name, attempt,
        times, progress, result or error). ``unknown`` when there is no record: never
        enqueued, or ended longer ago than ``keep_status`` (or its ``keep_result``).
        Inside a ``testing.fake()``/``inline()`` block: what the fake holds."""
        return await self._client.backend.status(jid, queue)

    async def result(self, jid: str, *, timeout: float | None = None,  # noqa: ASYNC109
                     queue: str | None = None) -> Any:
        """Wait for job ``jid`` to end; its return value (None unless it keeps its
        result: ``keep_result``). Raises ``JobFailed`` (dead), ``JobCancelled``,
        ``TimeoutError``, or ``LookupError`` (no such job). Inside a
        ``testing.fake()`` block: at once, from what the fake holds (a job still
        waiting there raises ``TimeoutError``: ``drain()`` it first)."""
        return await self._client.backend.result(jid, timeout, queue)

    async def cancel(self, jid: str, *, queue: str | None = None) -> CancelOutcome:
        """Cancel job ``jid``: ``"cancelled"`` (it was waiting: it will never run),
        ``"stopping"`` (it runs: its process stops it within about a second; a plain
        function sees ``current_job().cancel_requested``), ``"finished"`` (it had
        ended) or ``"unknown"``. A cancel outlives the process running the job: if it
        dies, recovery drops the job instead of running it again. Inside a
        ``testing.fake()`` block: in the fake."""
        return await self._client.backend.cancel(jid, queue)

    # -- workflows ----------------------------------------------------------------------

    @cached_property
    def batches(self) -> AppBatches:
        """This App's batches: ``open``, ``status``, ``results``, ``cancel``."""
        return AppBatches(self)

    def chain(self, *signatures: Signature, pass_result: bool = False) -> Chain:
        """Jobs that run one after another: ``await jobs.chain(a.s(1), b.s()).enqueue()``
        returns their jids; each runs after the one before succeeded, and with
        ``pass_result`` takes its return value as its first argument."""
        return Chain(signatures, pass_result=pass_result, tracked=self.settings.tracked)

    def _batch_backend(self) -> BatchBackend:
        """Where batches are kept: Redis (this event loop's Store), or the testing
        fake's memory inside a ``testing.fake()``/``inline()`` block."""
        return self._client.backend.batches()

    # -- flow control -------------------------------------------------------------------

    @cached_property
    def queues(self) -> AppQueues:
        """This App's queues: ``pause``, ``resume``, ``paused``."""
        return AppQueues(lambda: self._client.backend, self.settings)

    # -- older spellings of the namespaces' methods (API.md: they keep working) -----------

    def batch(self, description: str | None = None, *, on_success: Signature | None = None,
              on_complete: Signature | None = None, on_death: Signature | None = None,
              bid: str | None = None, parent: str | None = None,
              hold: float | None = None) -> Batch:
        """``jobs.batches.open(...)``."""
        return self.batches.open(description, on_success=on_success, on_complete=on_complete,
                                 on_death=on_death, bid=bid, parent=parent, hold=hold)

    async def batch_status(self, bid: str) -> BatchStatus:
        """``jobs.batches.status(bid)``."""
        return await self.batches.status(bid)

    async def batch_results(self, bid: str) -> dict[str, object]:
        """``jobs.batches.results(bid)``."""
        return await self.batches.results(bid)

    async def cancel_batch(self, bid: str) -> int:
        """``jobs.batches.cancel(bid)``."""
        return await self.batches.cancel(bid)

    async def pause(self, queue: str) -> bool:
        """``jobs.queues.pause(queue)``."""
        return await self.queues.pause(queue)

    async def resume(self, queue: str) -> bool:
        """``jobs.queues.resume(queue)``."""
        return await self.queues.resume(queue)

    async def paused(self, queues: Sequence[str] | None = None) -> dict[str, Pause]:
        """``jobs.queues.paused(queues)``."""
        return await self.queues.paused(queues)

    # -- connection -------------------------------------------------------------------

    def redis_url(self) -> str:
        """The URL in use: the configured one, ``$COGWORKER_REDIS_URL``, or the embedded
        server's (started now if no process on this host runs it yet)."""
        with self._url_lock:
            if self._url is None:
                self._url = self._pick_url(self.settings)
            return self._url

    def _pick_url(self, settings: Settings) -> str:
        url = settings.redis_url or environment.redis_url()
        if not url:
            if self._embedded is None:
                self._embedded = EmbeddedServer(settings.data_dir)
            return self._embedded.start()
        return urls.check(url)

    def _store(self) -> Store:
        """This event loop's Store: the Redis operations on this App's namespace, for
        tools (the admin model, scripts, tests). Its pool is bound to the running event
        loop and released by ``close()``; jobs are enqueued through the job functions.
        Inside a ``testing.fake()`` block: ``NotFaked`` (the fake reaches no server)."""
        return self._client.backend.store()

    def store(self) -> Store:
        """Deprecated: ``App._store()`` (internal since issue 42), warned once."""
        global _store_warned
        if not _store_warned:
            _store_warned = True
            warnings.warn("App.store() is internal; use jobs.queues, jobs.status/result/"
                          "cancel and cogworker_async.admin instead", DeprecationWarning,
                          stacklevel=2)
        return self._store()

    async def close(self) -> None:
        """Release the connection pools. An embedded server runs on (it is the folder's:
        ``cogworker-async embedded stop`` ends it)."""
        await self._client.close()
        self._embedded = None
        self._url = None

    # -- working ----------------------------------------------------------------------

    @asynccontextmanager
    async def worker(self, **overrides: Any) -> AsyncIterator[Worker]:
        """Run a worker for the duration of the block (a FastAPI/aiohttp lifespan).

        Leaving the block stops it gracefully: running jobs get ``shutdown_timeout``
        seconds, then are cancelled and given back. If the application has set up no
        logging (uvicorn sets up only its own loggers), the worker's lines go to stderr
        while it runs (``logs.heard``).
        """
        with logs.heard():
            async with self._worker(overrides) as manager:
                yield manager

    @asynccontextmanager
    async def _worker(self, overrides: dict[str, Any]) -> AsyncIterator[Worker]:
        if "group_limits" in overrides:  # merged with the limits the jobs declared
            overrides = {**overrides, "group_limits": merged_limits(
                self.settings.group_limits, overrides["group_limits"])}
        settings = dataclasses.replace(self.settings, **overrides)
        url = self._pick_url(settings) if "redis_url" in overrides else self.redis_url()
        store = Store.from_url(url, settings.namespace, dead_limits_of(settings),
                               durability_of(settings), settings.keep_status,
                               track_jobs=settings.tracked)
        try:
            manager = Manager(self.registry, settings, store, url,
                              periodics=list(self.periodics.values()),
                              middleware=self.server_middleware, hooks=self.hooks,
                              limiters={name: limiter.spec
                                        for name, limiter in self.limiters.items()},
                              lifespan=self._lifespan,
                              declared_queues=self.settings.queue_names, extras=WIRING)
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(manager.run)
                    try:
                        yield manager
                    finally:
                        manager.stop()
            except BaseExceptionGroup as group:  # the lifespan's failure, as itself
                failed = [leaf for leaf in group.exceptions if isinstance(leaf, LIFESPAN_ERRORS)]
                if failed:
                    raise failed[0] from failed[0].__cause__
                raise
        finally:
            with anyio.CancelScope(shield=True):
                await store.aclose()


def merged_limits(declared: Mapping[str, int], override: Mapping[str, int]) -> dict[str, int]:
    """``worker(group_limits=...)`` over the App's (and its jobs' ``Group(limit=)``): the
    union — a queue's limit is one value, so a different one for it is refused rather
    than dropping what a job declared."""
    for queue, limit in override.items():
        if queue in declared and declared[queue] != limit:
            raise ValueError(f"worker(group_limits=...) gives queue {queue!r} a group limit "
                             f"of {limit}, but its limit is {declared[queue]} already "
                             "(App(group_limits=...) or a job's Group(limit=)): one value "
                             "per queue")
    return {**declared, **override}
