"""The fake's dependencies: what ``redis/lua/dep_*.lua`` and the relay do, in memory.

A job enqueued with ``after=`` is held in the world (state ``waiting``, ``World.held``)
with the parents it has not heard the end of; a parent still alive is watched (it names
the dependent), one that ended already is applied at once, as ``Dependencies.arm``
applies it. A parent's end (``World.end``) reaches each of its watchers as
``dep_apply.lua`` takes it: a parent counts once; the first that did not succeed cancels
the dependent or ends it dead (``on_parent_failure``), unless it says ``run``; the last
one releases it onto its queue, behind what is there, with the parent's result as its
first argument (``pass_result``). A dependent's own end is a parent's end in turn, so
the cascade goes through the same door — one end at a time, as the relay takes its
notes, so that a long chain needs no deep recursion.

In a ``fake()`` block ``drain()`` takes a released job like any queued one; in an
``inline()`` block the harness runs it at once (``released``).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from cogworker_async.enqueue import after as dependents
from cogworker_async.enqueue.client import Push
from cogworker_async.jobs import wire
from cogworker_async.jobs.definition import JobOptions
from cogworker_async.jobs.retries import attempt_of
from cogworker_async.jobs.status import FINISHED, JobStatus, error_text
from cogworker_async.testing.world import Entry, Key, World

NO_RESULT = b"null"
"""What takes the place of a result the parent did not keep (``dep_apply.lua``)."""


@dataclass(slots=True)
class Dependent:
    """A held job's dep hash (``dep_wait.lua``): what it still waits for, and how."""

    pending: set[Key]
    """The parents whose end it has not heard."""
    policy: str
    """``on_parent_failure``: cancel, run or dead."""
    takes: Key | None
    """The parent whose result becomes its first argument (``pass_result``)."""
    head: bytes
    """The raw job; with ``takes``, the text before the argument the result becomes."""
    tail: bytes = b""
    result: bytes = NO_RESULT


class FakeDependencies:
    """Jobs waiting for others (``options(after=[...])``), in the fake's world."""

    def __init__(self, world: World) -> None:
        self._world = world
        self.dependents: dict[Key, Dependent] = {}
        self.watchers: dict[Key, list[Key]] = {}
        """Parent -> the jobs waiting for it, as its record's ``watchers`` names them."""
        self.released: list[Entry] | None = None
        """Set in an ``inline()`` block: the jobs released since, for the harness to run
        at once (None: they wait on their queue for ``drain()``)."""
        self._ends: deque[tuple[Key, JobStatus]] = deque()
        self._relaying = False

    def clear(self) -> None:
        self.dependents.clear()
        self.watchers.clear()
        self._ends.clear()
        if self.released is not None:
            self.released.clear()

    async def wait(self, push: Push, options: JobOptions, *, chosen: bool) -> bool:
        """Hold the job until ``options.after`` have ended (``enqueue/after.py``'s
        ``wait``): False if refused (a chosen jid that is alive); an unknown parent is a
        ValueError, as it is with Redis (the very check the client makes, asked of the
        world)."""
        world = self._world
        parents = await dependents.parents_of(_Lookup(world), options)
        key = (push.queue, push.jid)
        if key in world.held or (chosen and world.alive(push.jid)):
            return False
        takes = (parents[0].queue, parents[0].jid) if options.pass_result else None
        # Split as the client splits it for Redis: a middleware that changed the first
        # argument is refused here too.
        head, tail = dependents.split(push.raw) if takes is not None else (push.raw, b"")
        world.hold(push.raw, push.queue, push.jid)
        self.dependents[key] = Dependent({(p.queue, p.jid) for p in parents},
                                         options.on_parent_failure, takes, head, tail)
        ended: list[tuple[Key, JobStatus]] = []
        for parent in parents:
            parent_key = (parent.queue, parent.jid)
            status = world.status(parent.jid, parent.queue)
            if status.state in FINISHED:
                ended.append((parent_key, status))
            elif key not in (watching := self.watchers.setdefault(parent_key, [])):
                watching.append(key)
        self._apply(key, ended)
        return True

    def ended(self, queue: str, jid: str, status: JobStatus) -> None:
        """``World.on_finish``: a job's end, to each job watching it. An end it causes
        (a dependent cancelled in turn) waits its turn behind this one."""
        self._ends.append(((queue, jid), status))
        if self._relaying:
            return
        self._relaying = True
        try:
            while self._ends:
                parent, end = self._ends.popleft()
                for watcher in self.watchers.pop(parent, []):
                    self._apply(watcher, [(parent, end)])
        finally:
            self._relaying = False

    def _apply(self, key: Key, ends: Sequence[tuple[Key, JobStatus]]) -> None:
        """Parents' ends reach held job ``key`` (``dep_apply.lua``)."""
        world = self._world
        dependent = self.dependents.get(key)
        if dependent is None or key not in world.held:  # cancelled while it waited
            self.dependents.pop(key, None)
            return
        failed: tuple[Key, str] | None = None
        missing: Key | None = None
        for parent, status in ends:
            if parent not in dependent.pending:
                continue  # heard already: a parent counts once
            dependent.pending.discard(parent)
            if status.state != "succeeded":
                failed = failed or (parent, status.state)
            elif parent == dependent.takes:
                missing = _take_result(dependent, parent, status)
        if failed is not None and dependent.policy != "run":
            self._fail(key, dependent.policy, *failed)
        elif missing is not None and not dependent.pending:
            # dep_apply.lua: never run with None for a result it was promised
            self._fail(key, "dead", missing, "", error=error_text(
                "ParentResultMissing", f"job {key[1]} takes the result of parent "
                f"{missing[1]}, which succeeded keeping none (its keep_result)"))
        elif not dependent.pending:
            del self.dependents[key]
            raw = dependent.head if dependent.takes is None else \
                dependent.head + dependent.result + dependent.tail
            entry = world.release(key, raw)
            if self.released is not None:
                self.released.append(entry)

    def _fail(self, key: Key, policy: str, parent: Key, end: str,
              error: str | None = None) -> None:
        """A parent that did not succeed: the job ends cancelled or dead, unrun, saying
        which parent and how (or ``error``) — an end its own dependents hear in turn."""
        del self.dependents[key]
        payload = self._world.held.pop(key).payload()
        queue, jid = key
        self._world.end(queue, jid, JobStatus(
            jid=jid, state="dead" if policy == "dead" else "cancelled", queue=queue,
            name=wire.name(payload), attempt=attempt_of(payload),
            enqueued_at=wire.number(payload, "enqueued_at"), finished_at=time.time(),
            error=error or error_text("ParentFailed", f"parent {parent[1]} {end}")))


def _take_result(dependent: Dependent, parent: Key, status: JobStatus) -> Key | None:
    """The succeeded parent's result, kept for ``dependent``; the parent if it kept none."""
    if not status.has_result:
        return parent
    dependent.result = json.dumps(status.result, separators=(",", ":")).encode()
    return None


class _Lookup:
    """What ``dependents.parents_of`` asks of a ``JobLookup``: a jid's status, here the
    world's (it looks in every queue, as the lookup does)."""

    def __init__(self, world: World) -> None:
        self._world = world

    async def status(self, jid: str) -> JobStatus:
        return self._world.status(jid)
