"""The dedup modes in the fake (``dedup.py``), with the rules their scripts keep
(``redis/lua/enqueue_unique.lua`` as a throttle's window, ``debounce.lua``,
``coalesce.lua``): a throttle's window by the clock, a debounced job found waiting and
moved with the new arguments (its jid kept), a coalesced job merged while it waits, or
one follow-up held for the job that runs (as a dependent, ``on_parent_failure="run"``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable

from cogworker_async.enqueue.client import Push
from cogworker_async.jobs.dedup import placed
from cogworker_async.jobs.definition import JobOptions
from cogworker_async.testing.dependencies import FakeDependencies
from cogworker_async.testing.world import World

Key = tuple[str, str, str]
"""(queue, mode, digest): one key of one mode, as Redis' keys name it."""
PushNow = Callable[[Push, float | None, bool], Awaitable[bool]]
Wait = Callable[[Push, JobOptions, bool], Awaitable[bool]]


def as_jid(raw: bytes, old: str, new: str) -> bytes:
    """``raw`` (whose own jid is ``old``) with ``new`` for its jid, as the scripts make
    it: written where its own jid is (``dedup.placed``)."""
    raw, at = placed(raw, old)
    return raw[:at] + new.encode() + raw[at + len(old.encode()):]


class FakeDedup:
    def __init__(self, world: World, dependencies: FakeDependencies, push: PushNow,
                 wait: Wait) -> None:
        self._world = world
        self._dependencies = dependencies
        self._push = push
        self._wait = wait
        self.windows: dict[Key, float] = {}
        """A throttle's key -> when its window closes (monotonic s)."""
        self.latest: dict[Key, str] = {}
        """A debounced or coalesced key -> the jid of its latest job."""

    def clear(self) -> None:
        self.windows.clear()
        self.latest.clear()

    async def enqueue(self, push: Push, options: JobOptions, mode: str, seconds: float,
                      digest: str, due: float | None) -> str | None:
        key = (push.queue, mode, digest)
        if mode == "throttle":
            if self.windows.get(key, 0.0) > time.monotonic():
                return None
            self.windows[key] = time.monotonic() + seconds
            return push.jid if await self._push(push, due, False) else None
        if mode == "debounce":
            return await self._debounce(key, push, seconds)
        return await self._coalesce(key, push, options)

    async def _debounce(self, key: Key, push: Push, seconds: float) -> str:
        jid = self.latest.get(key)
        entry = next((e for e in self._world.waiting if e.jid == jid and e.queue == push.queue
                      and e.state == "scheduled"), None)
        if jid is not None and entry is not None:
            entry.raw, entry.due = as_jid(push.raw, push.jid, jid), time.time() + seconds
            return jid
        await self._push(push, time.time() + seconds, False)
        self.latest[key] = push.jid
        return push.jid

    async def _coalesce(self, key: Key, push: Push, options: JobOptions) -> str:
        jid, world = self.latest.get(key), self._world
        if jid is not None:
            waiting = next((e for e in world.waiting if e.jid == jid and e.queue == push.queue
                            and e.state == "queued"), None)
            held = world.held.get((push.queue, jid))
            if waiting is not None or held is not None:
                raw = as_jid(push.raw, push.jid, jid)
                for entry in (waiting, held):
                    if entry is not None:
                        entry.raw = raw
                copy = self._dependencies.dependents.get((push.queue, jid))
                if copy is not None:  # the held job's copy, which its release pushes
                    copy.head = raw
                return jid
            retrying = any(e.jid == jid and e.state == "retrying" for e in world.waiting)
            if (push.queue, jid) in world.running or retrying:
                follow = dataclasses.replace(options, coalesce=False, key=None, after=(jid,),
                                             on_parent_failure="run")
                await self._wait(push, follow, False)
                self.latest[key] = push.jid
                return push.jid
        await self._push(push, None, False)
        self.latest[key] = push.jid
        return push.jid
