"""One worker process's limiter calls, batched per limiter as its acks are.

A job inside ``async with limiter:`` asks Redis twice: to take a slot (a window's
acquisition, a bucket's token) and, for a concurrent limiter, to give it back. Asked one
by one, those calls cost a no-op job more than its own fetch and ack. Here the first
call goes out at once, and every call made while it is in flight goes together in the
next round: one script call per limiter for all the takes (``limit_concurrent.lua``
takes many members, ``limit_window.lua`` and ``limit_bucket.lua`` a count), one ``ZREM``
per limiter for all the releases. Nothing waits for a timer, so a lone job's call is one
round trip, as before; and each caller still waits for its own answer, so the semantics
are the unbatched ones (a slot is free again once ``async with`` has exited).

The rounds run in a task of their own, not in a job's: a job cancelled while its call is
in flight cancels only its wait. Its take may still land; the limiter then gives that
slot back, and the release goes in a later round than the take, so it cannot be lost to
reordering. A call whose caller stopped waiting before its round is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any, Final

from cogworker_async.errors import why
from cogworker_async.limits.waiters import settle_all
from cogworker_async.redis import limits
from cogworker_async.redis.errors import LostReply
from cogworker_async.redis.limits import Decision, LimitSpec, LimitStore

log = logging.getLogger("cogworker_async.limits.limiter")

MAX_BATCH: Final = 500
"""Calls sent in one script call at most."""

_Take = tuple[str | None, "asyncio.Future[Decision]"]
_Release = tuple[str, "asyncio.Future[None]"]


class LimitCalls:
    def __init__(self, store: LimitStore, unreleased: set[tuple[str, str]]) -> None:
        self.store = store
        self.unreleased = unreleased
        """(limiter, member) whose release met Redis away: the ``Runner``'s, which
        releases them again later."""
        self._takes: dict[str, tuple[LimitSpec, list[_Take]]] = {}
        self._releases: dict[str, list[_Release]] = {}
        self._rounds: asyncio.Task[None] | None = None

    async def take(self, name: str, spec: LimitSpec, member: str | None) -> Decision:
        """Ask limiter ``name`` for one acquisition (``member``: a concurrent slot's
        holder; None for a window or a bucket); raises what the script call raised."""
        done: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        waiting = self._takes.get(name)
        if waiting is None:
            self._takes[name] = (spec, [(member, done)])
        else:
            waiting[1].append((member, done))
        self._start()
        return await done

    async def release(self, name: str, member: str) -> None:
        """Give back ``member``'s slot of concurrent limiter ``name``; returns once it is
        given back, or kept in ``unreleased`` if Redis was away. Never raises but for
        the caller's cancellation, which cancels only its wait: the release is sent."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._releases.setdefault(name, []).append((member, done))
        self._start()
        await done

    def idle(self) -> bool:
        """Whether no call is waiting or in flight."""
        return self._rounds is None

    def _start(self) -> None:
        if self._rounds is None:
            self._rounds = asyncio.get_running_loop().create_task(self._run_rounds())

    async def _run_rounds(self) -> None:
        in_flight: list[asyncio.Future[Any]] = []
        try:
            while self._takes or self._releases:
                releases, self._releases = self._releases, {}
                takes, self._takes = self._takes, {}
                # Releases first: a slot given back is there for the takes of this round.
                in_flight.clear()
                for name, waiting in releases.items():
                    await self._release_all(name, waiting)
                for name, (spec, asked) in takes.items():
                    asked = [take for take in asked if not take[1].done()]
                    for start in range(0, len(asked), MAX_BATCH):
                        chunk = asked[start:start + MAX_BATCH]
                        in_flight[:] = [done for _, done in chunk]
                        await self._take_all(name, spec, chunk)
        finally:
            self._rounds = None
            self._interrupted(in_flight)

    async def _release_all(self, name: str, waiting: list[_Release]) -> None:
        try:
            await limits.release_slots(self.store, name, [member for member, _ in waiting])
        except BaseException as exc:  # cancelled too (the loop closing): kept, not lost
            self._keep(name, waiting, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            settle_all(waiting, None)

    async def _take_all(self, name: str, spec: LimitSpec, chunk: list[_Take]) -> None:
        try:
            decisions = await self._ask(name, spec, chunk)
        except Exception as exc:
            settle_all(chunk, exc)
            return
        for (_, done), decision in zip(chunk, decisions, strict=True):
            if not done.done():
                done.set_result(decision)

    def _interrupted(self, in_flight: list[asyncio.Future[Any]]) -> None:
        """Stopped mid-round (the loop is closing): nobody may wait forever. An uncertain
        reply for the takes: one that landed is given back by its limiter."""
        lost = LostReply("limiter call interrupted")
        for done in in_flight:
            if not done.done():
                done.set_exception(lost)
        for _, asked in self._takes.values():
            settle_all(asked, lost)
        for name, waiting in self._releases.items():
            self._keep(name, waiting, lost)
            settle_all(waiting, None)
        self._takes, self._releases = {}, {}

    def _keep(self, name: str, waiting: list[_Release], exc: BaseException) -> None:
        self.unreleased.update((name, member) for member, _ in waiting)
        log.warning("couldn't release a slot of limiter %r (%d in this call; %s): released "
                    "again once Redis is back", name, len(waiting), why(exc))

    async def _ask(self, name: str, spec: LimitSpec, chunk: list[_Take]) -> list[Decision]:
        if spec.kind == "concurrent":
            members = [member or "" for member, _ in chunk]
            return await limits.take_slots(self.store, name, spec.capacity, members)
        take = limits.take_window if spec.kind == "window" else limits.take_token
        decision = await take(self.store, name, spec.capacity, spec.seconds or 0.0, len(chunk))
        refused = replace(decision, admitted=False, granted=0)  # once a call, not a job
        return [decision if i < decision.granted else refused for i in range(len(chunk))]
