"""Client: turns enqueue calls into payloads and pushes them, checking input first.

Everything a job will need is checked here, at the caller: arguments that are not JSON,
arguments that don't fit the function, a bad queue name, a payload over the size limit.
The worker should never be the first to find out. An enqueue is never retried blindly
(a lost reply would push the job twice): a connection error reaches the caller.

With tracing on (``observe/tracing.py``), each enqueue runs in a PRODUCER span over the
checks and the push, and the payload carries the span's context to the worker.

What comes after the checks is the client's ``backend`` (``backend.py``): Redis, or the
testing fake for a ``jobs.testing.fake()`` block (``cogworker_async.testing``), which
swaps that one attribute: every check, the payload and the client middleware stay the real
path, and no line here asks which backend it holds.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from cogworker_async.enqueue import after as dependents
from cogworker_async.enqueue import dedup_push
from cogworker_async.enqueue.backend import Backend, Push, RedisBackend, duplicate
from cogworker_async.enqueue.lookup import QueueHints
from cogworker_async.enqueue.unknown_queue import QueueCheck
from cogworker_async.errors import UNTRACKED, ConfigurationError
from cogworker_async.jobs import context, dedup, unique, wire
from cogworker_async.jobs.definition import Delay, JobDefinition, JobOptions, When, enqueue_group
from cogworker_async.jobs.times import epoch_from, seconds_from
from cogworker_async.middleware import ClientMiddleware, Enqueue, EnqueueNext, client_chain
from cogworker_async.observe import tracing
from cogworker_async.redis.store import Store, dead_limits_of, durability_of
from cogworker_async.settings import Settings

if TYPE_CHECKING:
    from cogworker_async.observe.tracing import CallerContext

log = logging.getLogger(__name__)
__all__ = ["Backend", "Client", "Push", "epoch_from", "seconds_from"]  # the times: re-exported

async def mark_unique(enqueue: Enqueue, call_next: EnqueueNext) -> str | None:
    """Built-in client middleware: a unique job's payload carries its digest and policy
    (the worker releases the lock from them, even in a process without the registry)."""
    options: JobOptions = enqueue.options
    if options.unique is not None:
        payload = _fields(enqueue)
        definition: JobDefinition = enqueue.definition
        payload["unique_digest"] = unique.digest(definition.name, options.queue,
                                                 payload["args"], payload["kwargs"],
                                                 options.unique_key or definition.unique_key)
        payload["unique_policy"] = options.unique
        payload["unique_ttl"] = options.unique_ttl
    return await call_next(enqueue)


def _fields(enqueue: Enqueue) -> wire.Payload:
    """The payload a middleware passed on, seen as the job it was built as (middleware
    sees a plain dict: it may add fields of its own, and ``encode_new`` refuses what
    is not JSON)."""
    return cast(wire.Payload, enqueue.payload)


class Client:
    """Enqueue paths of one App, with a connection pool per event loop."""

    def __init__(
        self,
        settings: Settings,
        resolve_url: Callable[[], str],
        middleware: Sequence[ClientMiddleware] = (),
        app_queues: Callable[[], Collection[str]] | None = None,
    ) -> None:
        self.settings = settings
        self._resolve_url = resolve_url
        self.middleware = middleware
        # One pool per event loop (a pool is bound to the loop that made it): the
        # caller's loops, and the private loop of enqueue_sync.
        self._stores: dict[asyncio.AbstractEventLoop, Store] = {}
        self._portal_lock = threading.Lock()
        self._portal: BlockingPortal | None = None
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        # The one import check for tracing on this side (None: off, at no cost per job).
        self._tracer = tracing.job_tracer(settings.tracing,
                                          tracing.TraceOptions.of(settings))
        self.queue_hints = QueueHints()
        self.queue_check = QueueCheck(app_queues or self._declared_queues)
        """Warns once per queue on an enqueue to a queue not the App's (a typo?)."""
        """Where this App's recent enqueues went, for ``status(jid)`` (``lookup.py``)."""
        self.redis = RedisBackend(self)
        self.backend: Backend = self.redis
        """Where prepared jobs go: Redis, or a ``jobs.testing.fake()`` block's fake."""

    def _declared_queues(self) -> set[str]:
        return {self.settings.default_queue, *self.settings.queue_names}

    def store(self) -> Store:
        """This event loop's Store (a pool is bound to the loop that made it)."""
        loop = asyncio.get_running_loop()
        store = self._stores.get(loop)
        if store is None:
            for old in [other for other in self._stores if other.is_closed()]:
                del self._stores[old]  # its loop is gone: so are its connections
            store = self._stores[loop] = Store.from_url(
                self._resolve_url(), self.settings.namespace, dead_limits_of(self.settings),
                durability_of(self.settings), self.settings.keep_status,
                track_jobs=self.settings.tracked)
        return store

    async def _prepare(
        self,
        definition: JobDefinition,
        options: JobOptions,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        due: float | None = None,
    ) -> Push | None:
        """Check, build and pass the job through the client chain; None if refused.
        ``due``: when a scheduled job is due (epoch s), which its deadline must follow."""
        if options.queue not in self.queue_check.seen:  # the hot path's only cost
            self.queue_check.first_seen(options.queue)
        definition.check_arguments(args, kwargs)
        if not self.settings.tracked and (options.jid is not None
                                          or options.keep_result is not None):
            raise ConfigurationError(UNTRACKED)
        now = time.time()
        # ``expires_in`` counts from when the job may first start (as Sidekiq's): a job
        # scheduled for later gets its full window then.
        deadline = options.deadline(max(now, due or now))
        if deadline is not None and deadline <= max(now, due or now):
            raise ValueError(f"the job would expire before it could run: its deadline "
                             f"({deadline:.3f}) is not after "
                             f"{'its due time' if due else 'now'} ({max(now, due or now):.3f})")
        batch = context.BATCH.get()
        group = enqueue_group(definition, options, args, kwargs, self.settings.fetch)
        payload = wire.build(definition.name, args, kwargs, queue=options.queue,
                            retry=options.retry, now=now, jid=options.jid,
                            keep_result=options.keep_result, expires_at=deadline,
                            dead_on_expiry=options.dead_on_expiry,
                            bid=batch.bid if batch is not None else None,
                            priority=options.priority, group=group, timeout=options.timeout)
        if self._tracer is not None and self._tracer.active():  # before the middleware,
            # which may read or drop it
            self._tracer.inject(cast("dict[str, Any]", payload))
        if not self.middleware and options.unique is None:  # nothing to pass it through
            raw = wire.encode_new(payload, self.settings.max_payload_bytes)
            return Push(options.queue, raw, payload["jid"])
        prepared: list[Push] = []

        async def accept(enqueue: Enqueue) -> str | None:
            body = _fields(enqueue)
            raw = wire.encode_new(body, self.settings.max_payload_bytes)
            digest = wire.value(body, "unique_digest")
            lock = (str(digest), float(wire.value(body, "unique_ttl") or unique.DEFAULT_TTL)) \
                if digest else None
            prepared.append(Push(options.queue, raw, body["jid"], lock))
            return str(body["jid"])

        chain = client_chain([*self.middleware, mark_unique], accept)
        await chain(Enqueue(definition.name, cast("dict[str, Any]", payload), options,
                            definition))
        return prepared[0] if prepared else None

    @staticmethod
    def _due(delay: Delay | None, at: When | None) -> tuple[float | None, float | None]:
        """(epoch, delay) to schedule with, or (None, None) to enqueue now."""
        if delay is not None:
            seconds = seconds_from(delay)
            return (None, seconds) if seconds > 0 else (None, None)
        if at is not None:
            epoch = epoch_from(at)
            return (epoch, None) if epoch > time.time() else (None, None)
        return None, None

    async def enqueue(
        self,
        definition: JobDefinition,
        options: JobOptions,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        delay: Delay | None = None,
        at: When | None = None,
    ) -> str | None:
        if self._tracer is None or not self._tracer.active():
            jid = await self._enqueue(definition, options, args, kwargs, delay, at)
            self.queue_hints.note(jid, options.queue)
            return jid
        with self._tracer.sending(definition.name, options.queue) as span:
            jid = await self._enqueue(definition, options, args, kwargs, delay, at)
            self._tracer.sent(span, jid)
            self.queue_hints.note(jid, options.queue)
            return jid

    async def _enqueue(
        self,
        definition: JobDefinition,
        options: JobOptions,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        delay: Delay | None,
        at: When | None,
    ) -> str | None:
        if options.after:
            return await self._enqueue_after(definition, options, args, kwargs, delay, at)
        if dedup.mode_of(options) is not None:
            return await dedup_push.enqueue(self, definition, options, args, kwargs, delay,
                                           at)
        epoch, seconds = self._due(delay, at)
        due = epoch if seconds is None else time.time() + seconds
        push = await self._prepare(definition, options, args, kwargs, due)
        if push is None:
            return None
        batch = context.BATCH.get()
        if batch is None:
            return await self.backend.push(definition.name, options, push, epoch, seconds,
                                           None)
        # Destination first: it is pending before it can end.
        joined = await batch.joining([push.jid])
        jid = await self.backend.push(definition.name, options, push, epoch, seconds,
                                      batch.bid)
        if jid is None and joined:  # only what this push added
            await batch.left(joined)
        return jid

    async def _enqueue_after(self, definition: JobDefinition, options: JobOptions,
                             args: Sequence[Any], kwargs: Mapping[str, Any],
                             delay: Delay | None, at: When | None) -> str | None:
        """A job that waits for its parents (``enqueue/after.py``)."""
        dependents.check_call(options, scheduled=delay is not None or at is not None,
                              tracked=self.settings.tracked)
        push = await self._prepare(definition, options, dependents.arguments(options, args),
                                   kwargs)
        if push is None:
            return None
        batch = context.BATCH.get()
        joined = await batch.joining([push.jid]) if batch is not None else []
        refused: Exception | None = None
        try:
            taken = await self.backend.wait(definition.name, options, push, batch)
        except (TypeError, ValueError) as exc:  # refused at the call: nothing written
            taken, refused = False, exc
        if not taken and batch is not None and joined:
            await batch.left(joined)
        if refused is not None:
            raise refused
        return push.jid if taken else duplicate(push.jid)

    async def enqueue_many(
        self,
        definition: JobDefinition,
        options: JobOptions,
        calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]],
    ) -> list[str | None]:
        if self._tracer is None or not self._tracer.active():
            jids = await self._enqueue_many(definition, options, calls)
        else:
            batch = list(calls)  # its length is the span's message count
            with self._tracer.sending(definition.name, options.queue, count=len(batch)):
                # One span for the batch, whose context every job of it carries.
                jids = await self._enqueue_many(definition, options, batch)
        for jid in jids:
            self.queue_hints.note(jid, options.queue)
        return jids

    async def _enqueue_many(
        self,
        definition: JobDefinition,
        options: JobOptions,
        calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]],
    ) -> list[str | None]:
        if options.jid is not None:
            raise ValueError("options(jid=...) names one job: enqueue it with enqueue(), "
                             "not enqueue_many()")
        if options.after or dedup.mode_of(options):  # each on its own: a wait, a dedup rule
            return [await self._enqueue(definition, options, args, kwargs, None, None)
                    for args, kwargs in calls]
        pushes: list[Push | None] = []
        for index, call in enumerate(calls):
            try:
                args, kwargs = call
            except (TypeError, ValueError):
                raise TypeError(f"enqueue_many item {index} is not an (args, kwargs) pair") from None  # noqa: E501
            pushes.append(await self._prepare(definition, options, tuple(args), dict(kwargs)))
        batch = context.BATCH.get()
        pushed = [push for push in pushes if push is not None]
        joined = set(await batch.joining([p.jid for p in pushed]) if batch is not None
                     else [])
        refused = await self.backend.push_many(definition.name, options.queue, pushed,
                                               batch.bid if batch is not None else None)
        if batch is not None and refused & joined:
            await batch.left(sorted(refused & joined))
        return [p.jid if p is not None and p.jid not in refused else None for p in pushes]

    def enqueue_sync(
        self,
        definition: JobDefinition,
        options: JobOptions,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> str | None:
        """``enqueue`` from code that is not async: run on a private event loop thread
        (so client middleware and unique locks behave exactly as in ``enqueue``)."""
        # The private loop does not see this thread's context: the enqueue's span is
        # made a child of the caller's (a sync web framework's request span) by hand.
        caller = self._tracer.current() if self._tracer is not None else None
        return self.backend.run_sync(partial(self._enqueue_now, definition, options, args,
                                             kwargs, caller))

    def private_loop(self) -> BlockingPortal:
        """The event loop thread of the sync calls, started on first use."""
        with self._portal_lock:
            if self._portal is None:
                self._resolve_url()  # an embedded server starts from the caller's thread
                self._portal_cm = start_blocking_portal()
                self._portal = self._portal_cm.__enter__()
            return self._portal

    async def prepare(self, definition: JobDefinition, options: JobOptions,
                      args: Sequence[Any], kwargs: Mapping[str, Any]) -> Push | None:
        """A job checked and built as ``enqueue`` would push it now, not pushed: what the
        outbox writes in the caller's transaction (``outbox/__init__.py``); None: refused."""
        if options.unique is not None or options.after or options.jid is not None \
                or dedup.mode_of(options) is not None:
            raise ValueError(f"{definition.name}: a unique, after=, dedup or chosen-jid "
                             "job is decided as it is pushed: it cannot wait in an outbox")
        return await self._prepare(definition, options, args, kwargs)

    def prepare_sync(self, definition: JobDefinition, options: JobOptions,
                     args: Sequence[Any], kwargs: Mapping[str, Any]) -> Push | None:
        """``prepare`` from code that is not async (on the private event loop)."""
        found: Push | None = self.private_loop().call(self.prepare, definition, options,
                                                       args, kwargs)
        return found

    async def _enqueue_now(
        self,
        definition: JobDefinition,
        options: JobOptions,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        caller: CallerContext | None,
    ) -> str | None:
        if self._tracer is None or caller is None:
            return await self.enqueue(definition, options, args, kwargs)
        with self._tracer.within(caller):
            return await self.enqueue(definition, options, args, kwargs)

    async def close(self) -> None:
        store = self._stores.pop(asyncio.get_running_loop(), None)
        if store is not None:
            await store.aclose()
        with self._portal_lock:
            portal, cm = self._portal, self._portal_cm
            self._portal = self._portal_cm = None
        if portal is not None and cm is not None:
            await anyio.to_thread.run_sync(self._close_portal, portal, cm)

    def _close_portal(
        self, portal: BlockingPortal, cm: AbstractContextManager[BlockingPortal]
    ) -> None:
        portal.call(self._close_own_store)
        cm.__exit__(None, None, None)
        self._stores = {loop: store for loop, store in self._stores.items()
                        if not loop.is_closed()}

    async def _close_own_store(self) -> None:
        store = self._stores.pop(asyncio.get_running_loop(), None)
        if store is not None:
            await store.aclose()
