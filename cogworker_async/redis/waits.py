"""Finished waits: one pub/sub subscription shared by every ``result()`` waiter of a Store.

A subscription holds a connection for as long as it lasts. One per waiter made 50
concurrent ``result()`` calls take the pool's 100 connections (with their record reads)
and the next ones fail with ``MaxConnectionsError``. Here the waiters of one Store (one
event loop) share one pub/sub connection, subscribed to the finished channels of the
jids being waited on: a channel is subscribed when its first waiter comes and
unsubscribed when its last one leaves; the connection is closed when nobody waits.

No task of its own: the waiter whose turn it is reads the connection for everyone
(``_read``), sends the pending SUBSCRIBE/UNSUBSCRIBE between short reads, and hands the
turn on when its own wait is over. What a waiter is told is only "look at the record
again": it is told so for a message on its channel and when its channel's subscription
is confirmed (a job that ended between the waiter's first look and the subscription is
not missed). A lost connection tells every waiter to look again and is subscribed anew
by the next reader (``RESUBSCRIBE_AFTER`` apart at most), so a broken subscription makes
the waits slower, never wrong: ``enqueue/lookup.py`` looks at the record at a growing interval
whatever it hears.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import redis.asyncio
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

READ_SLICE: Final = 0.1
"""Seconds the reader waits for a message before it sends pending (un)subscriptions: how
long a new waiter's subscription may wait (it looks at the record meanwhile)."""
LOOKS_AT_ONCE: Final = 8
"""Waiters' record reads in flight at once per Store: 200 waiters looking at the same
moment must not take 200 of the pool's connections either."""
RESUBSCRIBE_AFTER: Final = 1.0
"""Seconds after a failed or lost subscription before a reader tries again (with many
waiters and Redis away, one try per second, not one per waiter)."""


class Waiter:
    """One waiter's end of the shared subscription."""

    def __init__(self, waits: FinishedWaits, channel: str) -> None:
        self._waits = waits
        self.channel = channel
        self.told = False
        """Something happened on its channel (or to the subscription): look again."""
        self.nudge = anyio.Event()

    def tell(self) -> None:
        self.told = True
        self.nudge.set()

    async def heard(self, seconds: float) -> None:
        """Return when told to look again, or after ``seconds``."""
        await self._waits.wait(self, seconds)


class FinishedWaits:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._client = client
        self._waiters: dict[str, set[Waiter]] = {}
        self._pubsub: Any = None
        self._subscribed: set[str] = set()
        self._reading = False
        self._retry_at = 0.0
        self.looks = anyio.Semaphore(LOOKS_AT_ONCE)
        """Held by a waiter while it reads its record."""

    @property
    def channels(self) -> int:
        """Channels waited on now."""
        return len(self._waiters)

    @asynccontextmanager
    async def watch(self, channel: str) -> AsyncIterator[Waiter]:
        waiter = Waiter(self, channel)
        self._waiters.setdefault(channel, set()).add(waiter)
        try:
            yield waiter
        finally:
            others = self._waiters.get(channel, set())
            others.discard(waiter)
            if not others:
                self._waiters.pop(channel, None)
            if not self._waiters and not self._reading:
                await self._close()

    async def wait(self, waiter: Waiter, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not waiter.told and (left := deadline - time.monotonic()) > 0:
            if self._reading or time.monotonic() < self._retry_at:
                waiter.nudge = anyio.Event()
                with anyio.move_on_after(min(left, RESUBSCRIBE_AFTER)):
                    await waiter.nudge.wait()
            else:
                await self._read(waiter, deadline)
        waiter.told = False

    async def _read(self, waiter: Waiter, deadline: float) -> None:
        """Read for every waiter until ``waiter`` is told or its deadline; then hand on."""
        self._reading = True
        try:
            while not waiter.told and (left := deadline - time.monotonic()) > 0:
                pubsub = await self._sync()
                message = await pubsub.get_message(timeout=min(left, READ_SLICE))
                if message is not None:
                    self._dispatch(message)
        except (RedisError, OSError) as exc:
            log.debug("result(): subscription lost (%s): looking at the records", exc)
            self._lost()
            await self._close()
        except BaseException:  # cancelled mid-read: the connection's state is unknown
            self._lost()
            await self._close()
            raise
        finally:
            self._reading = False
            for waiters in list(self._waiters.values()):  # the next one reads
                for other in waiters:
                    other.nudge.set()
            if not self._waiters:
                await self._close()

    async def _sync(self) -> Any:
        """The pub/sub connection, subscribed to the channels waited on now."""
        if self._pubsub is None:
            self._pubsub = self._client.pubsub()
        wanted = set(self._waiters)
        new, old = wanted - self._subscribed, self._subscribed - wanted
        if new:
            await self._pubsub.subscribe(*sorted(new))
            self._subscribed |= new
        if old:
            await self._pubsub.unsubscribe(*sorted(old))
            self._subscribed -= old
        return self._pubsub

    def _dispatch(self, message: dict[str, Any]) -> None:
        channel = message.get("channel")
        if isinstance(channel, bytes):
            channel = channel.decode("utf-8", "replace")
        # "subscribe": from now on its end is heard, so one more look at the record
        # covers an end between the waiter's first look and the subscription.
        if message.get("type") in ("message", "subscribe") and isinstance(channel, str):
            for waiter in self._waiters.get(channel, ()):
                waiter.tell()

    def _lost(self) -> None:
        self._retry_at = time.monotonic() + RESUBSCRIBE_AFTER
        for waiters in self._waiters.values():  # an end may have gone unheard
            for waiter in waiters:
                waiter.tell()

    async def _close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        self._subscribed = set()
        if pubsub is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await pubsub.aclose()
            except (RedisError, OSError):
                pass

    async def aclose(self) -> None:
        await self._close()
