"""Client: turns enqueue calls into payloads and pushes them, checking input first.

Everything a job will need is checked here, at the caller: arguments that are not JSON,
arguments that don't fit the function, a bad queue name, a payload over the size limit.
The worker should never be the first to find out. An enqueue is never retried blindly
(a lost reply would push the job twice): a connection error reaches the caller.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from cogworker_async import job
from cogworker_async.redis.store import Store, SyncStore
from cogworker_async.registry import Delay, JobDefinition, JobOptions, When
from cogworker_async.settings import Settings


def seconds_from(delay: Delay) -> float:
    """A delay as seconds; refuse what is not one."""
    if isinstance(delay, timedelta):
        value = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        value = float(delay)
    else:
        raise TypeError(f"a delay must be seconds or a timedelta, not {type(delay).__name__}")
    if math.isnan(value) or value < 0:
        raise ValueError(f"a delay must be >= 0 seconds, got {value!r}")
    return value


def epoch_from(when: When) -> float:
    """A point in time as epoch seconds; refuse naive datetimes."""
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError("enqueue_at needs an aware datetime (with tzinfo), or epoch seconds")
        return when.timestamp()
    if isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
        return float(when)
    raise TypeError(f"enqueue_at takes an aware datetime or epoch seconds, not {when!r}")


class Client:
    """Enqueue paths of one App, with a connection pool per event loop."""

    def __init__(self, settings: Settings, resolve_url: Callable[[], str]) -> None:
        self.settings = settings
        self._resolve_url = resolve_url
        self._store: Store | None = None
        self._store_loop: asyncio.AbstractEventLoop | None = None
        self._sync_store: SyncStore | None = None
        self._sync_lock = threading.Lock()

    def store(self) -> Store:
        """This event loop's Store (a pool is bound to the loop that made it)."""
        loop = asyncio.get_running_loop()
        if self._store is None or self._store_loop is not loop:
            self._store = Store.from_url(self._resolve_url(), self.settings.namespace)
            self._store_loop = loop
        return self._store

    def _prepare(
        self,
        definition: JobDefinition,
        options: JobOptions,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> tuple[str, bytes]:
        definition.check_arguments(args, kwargs)
        payload = job.build(definition.name, args, kwargs, queue=options.queue,
                            retry=options.retry, now=time.time())
        return payload["jid"], job.encode(payload, self.settings.max_payload_bytes)

    @staticmethod
    def _due(delay: Delay | None, at: When | None) -> float | None:
        """Epoch time to schedule for, or None to enqueue now."""
        now = time.time()
        if delay is not None:
            seconds = seconds_from(delay)
            return now + seconds if seconds > 0 else None
        if at is not None:
            epoch = epoch_from(at)
            return epoch if epoch > now else None
        return None

    async def enqueue(
        self,
        definition: JobDefinition,
        options: JobOptions,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        delay: Delay | None = None,
        at: When | None = None,
    ) -> str:
        due = self._due(delay, at)
        jid, raw = self._prepare(definition, options, args, kwargs)
        store = self.store()
        if due is None:
            await store.enqueue(options.queue, [raw])
        elif delay is not None:
            await store.schedule([raw], delay=seconds_from(delay))
        else:
            await store.schedule([raw], at=due)
        return jid

    async def enqueue_many(
        self,
        definition: JobDefinition,
        options: JobOptions,
        calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]],
    ) -> list[str]:
        jids, raws = [], []
        for index, call in enumerate(calls):
            try:
                args, kwargs = call
            except (TypeError, ValueError):
                raise TypeError(f"enqueue_many item {index} is not an (args, kwargs) pair") from None  # noqa: E501
            jid, raw = self._prepare(definition, options, tuple(args), dict(kwargs))
            jids.append(jid)
            raws.append(raw)
        if raws:
            await self.store().enqueue(options.queue, raws)
        return jids

    def enqueue_sync(
        self,
        definition: JobDefinition,
        options: JobOptions,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> str:
        jid, raw = self._prepare(definition, options, args, kwargs)
        with self._sync_lock:
            if self._sync_store is None:
                self._sync_store = SyncStore(self._resolve_url(), self.settings.namespace)
        self._sync_store.enqueue(options.queue, [raw])
        return jid

    async def close(self) -> None:
        store, self._store = self._store, None
        if store is not None and self._store_loop is asyncio.get_running_loop():
            await store.aclose()
        self._store_loop = None
        sync_store, self._sync_store = self._sync_store, None
        if sync_store is not None:
            sync_store.close()
