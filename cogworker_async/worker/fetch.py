"""Fetch: how a worker takes jobs from its queues.

``ReliableFetch`` moves each job onto this process's in-progress list in the same step
that takes it off the queue (LMOVE in ``fetch.lua``), several at a time, so a crash at
any moment leaves every job in Redis. ``BasicFetch`` pops with BRPOP: a job that is
running when the process dies is lost. It exists for Redis < 6.2 and for users who
accept that; say so wherever it is offered.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Final, Protocol

import anyio

from cogworker_async.jobs.dedup import COALESCED
from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings

log = logging.getLogger(__name__)

BASIC_POP_TIMEOUT: Final = 1.0
"""Seconds one BRPOP blocks: how long a basic-fetch worker takes to notice a stop."""



@dataclass(slots=True)
class Work:
    """One fetched job: the queue it came from and its raw bytes, exactly as stored."""

    queue: str
    raw: bytes
    fetched_at: float = field(default_factory=time.time)
    jid: str | None = None
    """Filled in once the payload is read (saves parsing it again to ack it)."""


def weighted_order(weights: list[tuple[str, int]], rng: random.Random | None = None) -> list[str]:
    """A queue order drawn by weight: a queue of weight 3 comes first 3 times as often
    as one of weight 1, and every queue appears once (none starves)."""
    pick = rng or random
    remaining = list(weights)
    order: list[str] = []
    while remaining:
        total = sum(weight for _, weight in remaining)
        point = pick.uniform(0, total)
        for index, (name, weight) in enumerate(remaining):
            point -= weight
            if point <= 0 or index == len(remaining) - 1:
                order.append(name)
                del remaining[index]
                break
    return order


class Fetcher(Protocol):
    reliable: bool

    async def fetch(self, count: int) -> list[Work]: ...

    async def wait(self, nudge: anyio.Event, block_for: float) -> list[Work]:
        """Idle: wait up to ``block_for`` s for work (a nudge, or a job moved meanwhile)."""
        ...


class QueueOrder:
    def __init__(self, settings: Settings) -> None:
        self._weights = settings.queue_weights
        self._strict = settings.queue_names
        self._weighted = settings.weighted

    def __call__(self) -> list[str]:
        return weighted_order(self._weights) if self._weighted else self._strict


class ReliableFetch:
    reliable = True

    def __init__(self, store: Store, settings: Settings, identity: str) -> None:
        self._store = store
        self._identity = identity
        self._order = QueueOrder(settings)
        self._limits = dict(settings.queue_limits)
        self._aging = settings.priority_aging
        self._group_limits = dict(settings.group_limits)
        self._warned: set[str] = set()

    async def fetch(self, count: int) -> list[Work]:
        fetched = await self._store.fetch(self._identity, self._order(), count, self._limits,
                                          self._aging, self._group_limits)
        for queue in fetched.bad_queues:
            if queue not in self._warned:  # once per process: it would repeat every fetch
                self._warned.add(queue)
                log.error("queue %r is not a list in Redis (wrong type): skipped", queue)
        for queue, jid in fetched.cancelled:
            log.info("cancelled before it ran: jid=%s (queue %r): dropped", jid, queue)
        return [Work(queue, raw) for queue, raw in fetched.jobs]

    async def wait(self, nudge: anyio.Event, block_for: float) -> list[Work]:
        """Wait for the wake-up an enqueue publishes (or ``block_for``, if one is missed).

        Not a blocking move (BLMOVE) on the queue, though it would save a round trip:
        Redis completes a blocking move even for a process that is paused or whose loop
        is blocked, and the job then waits in that process until it is declared dead.
        A wake-up only makes a process fetch when it can run what it fetches."""
        with anyio.move_on_after(block_for):
            await nudge.wait()
        return []


class BasicFetch:
    reliable = False

    def __init__(self, store: Store, settings: Settings) -> None:
        self._store = store
        self._order = QueueOrder(settings)

    async def fetch(self, count: int) -> list[Work]:
        # BRPOP cannot read a pause flag: the flags are read first (one round trip; a
        # pause lands within a pop's block at worst). Basic fetch is not the fast path.
        order = self._order()
        paused = await self._store.pauses(order)
        ready = [queue for queue in order if queue not in paused]
        if not ready:
            await anyio.sleep(BASIC_POP_TIMEOUT)
            return []
        popped = await self._store.pop(ready, BASIC_POP_TIMEOUT)
        if not popped:
            return []
        queue, raw = popped
        if COALESCED in raw:  # one more call, for a job of a coalesced key only
            raw = await self._coalesced(queue, raw)
        return [Work(queue, raw)]

    async def _coalesced(self, queue: str, raw: bytes) -> bytes:
        """The job to run (a merge waiting for it taken), its record told that it no
        longer takes merges (``coalesce_popped.lua``). Popped already: a failure here
        runs it as popped (a merge lost), rather than losing it."""
        try:
            return await self._store.dedup.popped(queue, raw)
        except Exception as exc:  # Redis away, refused: the job is ours, run it
            log.warning("a coalesced job popped from %r could not take its merge: %r",
                        queue, exc)
            return raw

    async def wait(self, nudge: anyio.Event, block_for: float) -> list[Work]:
        return []  # fetch itself blocks (BRPOP)
