"""Dependencies in Redis: a job that runs after its parents (``options(after=[...])``).

A waiting job lives in its own queue's slot (``dep_wait.lua``): its copy, the parents it
has not heard the end of, its record saying ``waiting``. Each parent, in its own slot, is
told it is watched (``dep_watch.lua``): its record names the dependent, so the settle
script that ends it notes its end with its watchers (``_record.lua``), and the notes relay
carries the note to each dependent (``dep_apply.lua``), which is released onto its queue,
or cancelled, or filed in dead, in the step that hears the last parent's end. A parent
that ended before it was watched says so to the watch, and its end is applied at once.

Crash windows, by step: a death after ``wait`` and before every parent is watched leaves
the job in the queue's ``arming`` set, which the relay arms again after ``ARM_GRACE``
(``arm``: watching twice names a watcher once, and an end applied twice counts once). A
death after a parent's note is applied and before it is dropped applies it again: the
pending set's SREM makes it count once, and a released job's copy is gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, cast

from redis.exceptions import ResponseError

from cogworker_async.jobs.status import LIVE_TTL
from cogworker_async.redis.part import Part, Shared, as_bytes, as_list, wrong_type
from cogworker_async.redis.queues import QueuesPart

log = logging.getLogger(__name__)

ARM_GRACE: Final = 30.0
"""Seconds after its wait began that a job whose parents are not all watched is taken
for one whose enqueuer died between the steps, and armed by the relay."""
ARMING_PER_PASS: Final = 100

_MAY_RUN: Final = frozenset({b"queued", b"scheduled", b"running", b"retrying", b"waiting"})
"""The states of a live record whose job may still run (``_record.lua``'s LIVE_STATES)."""
Policy = Literal["cancel", "run", "dead"]
POLICIES: Final[tuple[Policy, ...]] = ("cancel", "run", "dead")
Became = Literal["waiting", "released", "cancelled", "dead", "gone"]


@dataclass(frozen=True, slots=True)
class Parent:
    """A job another waits for: its queue and jid."""

    queue: str
    jid: str

    @property
    def member(self) -> str:
        """How the dependent's pending set and the notes name it."""
        return f"{self.queue}/{self.jid}"

    @classmethod
    def of(cls, member: str) -> Parent:
        queue, _, jid = member.partition("/")
        return cls(queue, jid)


@dataclass(frozen=True, slots=True)
class Watcher:
    """A job waiting for a parent, as the parent's record names it."""

    queue: str
    jid: str
    takes_result: bool = False

    def text(self) -> str:
        return f"{'+' if self.takes_result else ''}{self.queue}/{self.jid}"

    @classmethod
    def parse(cls, text: str) -> Watcher | None:
        takes = text.startswith("+")
        queue, slash, jid = text.removeprefix("+").partition("/")
        return cls(queue, jid, takes) if slash and queue and jid else None


def parse_watchers(text: str) -> list[Watcher]:
    """The watchers a note carries (``_record.lua``: joined by "\\x1e")."""
    return [w for w in (Watcher.parse(part) for part in text.split("\x1e") if part) if w]


class Dependencies(Part):
    def __init__(self, shared: Shared, queues: QueuesPart) -> None:
        super().__init__(shared)
        self.queues = queues

    def _dep_keys(self, queue: str, jid: str) -> list[str]:
        return self.keys.dep_keys(queue, jid)

    async def wait(self, queue: str, jid: str, raw: bytes, parents: Sequence[Parent], *,
                   policy: Policy = "cancel", takes_result_of: Parent | None = None,
                   name: str = "", batch: str | None = None, chosen: bool = False,
                   tail: bytes = b"") -> bool:
        """Job ``jid`` of ``queue`` waits for ``parents``; False if refused (a chosen
        jid alive, or it already waits). ``takes_result_of``: ``raw`` and ``tail`` are
        the job's text before and after the argument that parent's result becomes."""
        await self.queues.register_queues([queue])
        now = time.time()
        args: list[object] = [
            jid, raw, tail, policy, takes_result_of.member if takes_result_of else "",
            repr(now), "0", LIVE_TTL, name, batch or "", "1" if chosen else "0",
            *(parent.member for parent in parents)]
        return int(await self.scripts.run("dep_wait", self._dep_keys(queue, jid), args,
                                          durable=True)) == 1

    async def watch(self, parent: Parent, watcher: Watcher) -> tuple[str, str]:
        """``watcher`` watches ``parent``: ("watching", ""), (its end, its result as
        JSON or "") if it ended already, or ("unknown", "") with no record of it."""
        reply = as_list(await self.scripts.run(
            "dep_watch", [self.keys.record(parent.queue, parent.jid),
                          self.keys.watchers(parent.queue, parent.jid)], [watcher.text()],
            durable=True))
        state = as_bytes(reply[0]).decode() if reply else "unknown"
        result = as_bytes(reply[1]).decode("utf-8", "replace") if len(reply) > 1 else ""
        return state, result

    async def watchers(self, parent: Parent, text: str) -> list[Watcher]:
        """The jobs to tell of ``parent``'s end, whose note names ``text``: those it
        names, and with "*" the members of the parent's watchers set — unless the parent
        is alive again (retried by hand before this end was relayed): they hear its next
        end. A set of another type (a co-tenant's) adds none: ``dep_watch`` wrote none
        there."""
        named = parse_watchers(text)
        if "*" not in text.split("\x1e"):
            return named
        if await self._alive_again(parent):
            return named
        key = self.keys.watchers(parent.queue, parent.jid)
        try:
            members = [as_bytes(m).decode("utf-8", "replace")
                       async for m in self.client.sscan_iter(key, count=1000)]
        except ResponseError as exc:
            if not wrong_type(exc):
                raise
            log.error("job %s: its watchers set %s is not a set: its end is told only to "
                      "the jobs its note names", parent.jid, key)
            return named
        return [*named, *(w for w in map(Watcher.parse, sorted(set(members))) if w)]

    async def _alive_again(self, parent: Parent) -> bool:
        """Whether ``parent``'s live record says it may run again. Its state, not the
        record's place: a job cancelled while queued stays in the live hash (``cancel``
        "1", until a move drops its copy) with its end already noted — read as alive, its
        dependents on a paused or unserved queue were never told and waited for good."""
        text = await self.client.hget(self.keys.live_records(parent.queue), parent.jid)
        if text is None:
            return False
        state = as_bytes(text).split(b"\t", 1)[0]
        return state in _MAY_RUN

    async def told(self, parent: Parent, watchers: Sequence[Watcher]) -> None:
        """``watchers`` have heard ``parent``'s end: off its watchers set (a member that
        was never there costs nothing), so that its next end (retried from dead) is told
        only to whoever watches it then."""
        key = self.keys.watchers(parent.queue, parent.jid)
        texts = [w.text() for w in watchers]
        for start in range(0, len(texts), 1000):
            try:
                await self.client.srem(key, *texts[start:start + 1000])
            except ResponseError as exc:
                if not wrong_type(exc):
                    raise
                return

    async def apply(self, queue: str, jid: str,
                    ends: Sequence[tuple[Parent, str, str]], *, armed: bool = False,
                    max_bytes: int = 0) -> Became:
        """Parents' (parent, end, result) reach waiting job ``jid`` of ``queue``; what
        became of it (``dep_apply.lua``). ``max_bytes``: the largest job a worker reads
        (0: not checked), which a parent's result must not take it over."""
        limits = self.shared.dead_limits
        args: list[object] = [jid, repr(time.time()), self.keys.wake_channel, queue, LIVE_TTL,
                              self.keep_status, limits.max_jobs, repr(float(limits.max_age)),
                              "1" if armed else "0", int(max_bytes)]
        for parent, end, result in ends:
            args += [parent.member, end, result]
        keys = [*self._dep_keys(queue, jid), self.keys.queue(queue), self.keys.dead(queue)]
        became = as_bytes(await self.scripts.run("dep_apply", keys, args, durable=True))
        return became.decode()  # type: ignore[return-value]

    async def arm(self, queue: str, jid: str, parents: Sequence[Parent],
                  takes_result_of: Parent | None = None, *, max_bytes: int = 0) -> Became:
        """Watch each of waiting job ``jid``'s ``parents``, then apply the ends of those
        that ended already (an unknown parent counts as dead: nothing will ever end it
        for the job). Safe to run again, by the enqueuer or by the relay."""
        ends: list[tuple[Parent, str, str]] = []
        for parent in parents:
            watcher = Watcher(queue, jid, takes_result=parent == takes_result_of)
            state, result = await self.watch(parent, watcher)
            if state != "watching":
                ends.append((parent, "dead" if state == "unknown" else state, result))
        return await self.apply(queue, jid, ends, armed=True, max_bytes=max_bytes)

    async def clock(self) -> float:
        """Redis' clock (epoch s): the one ``dep_wait`` scores ``arming`` by."""
        seconds, micros = await self.client.time()
        return float(seconds) + micros / 1e6

    async def unarmed(self, queue: str, older_than: float = ARM_GRACE,
                      count: int = ARMING_PER_PASS, now: float | None = None) -> list[str]:
        """Jids of ``queue`` waiting longer than ``older_than`` s with parents unwatched
        (``now``: Redis' clock, read once for a pass over many queues)."""
        now = now if now is not None else await self.clock()
        found = await self.client.zrangebyscore(self.keys.arming(queue), "-inf",
                                                now - older_than, start=0, num=count)
        return [as_bytes(cast("bytes | str", jid)).decode() for jid in found]

    async def read(self, queue: str, jid: str) -> tuple[list[Parent], Parent | None] | None:
        """A waiting job's parents and the one whose result it takes; None if none waits."""
        got = await self.client.hmget(self.keys.dep(queue, jid), ["parents", "pass"])
        if got[0] is None:
            return None
        parents = [Parent.of(m) for m in as_bytes(got[0]).decode().split("\x1e") if m]
        passed = as_bytes(got[1] or b"").decode()
        return parents, Parent.of(passed) if passed else None

    async def rearm(self, queue: str, older_than: float = ARM_GRACE,
                    now: float | None = None) -> int:
        """Arm the jobs of ``queue`` whose enqueuer died before it watched every parent;
        how many."""
        armed = 0
        for jid in await self.unarmed(queue, older_than, now=now):
            found = await self.read(queue, jid)
            if found is None:  # released or ended meanwhile: apply forgets its entry
                await self.apply(queue, jid, [], armed=True)
                continue
            await self.arm(queue, jid, *found)
            armed += 1
        return armed

    async def waiting_count(self, queue: str) -> int:
        return int(await self.client.zcard(self.keys.waiting(queue)))
