"""Backend: the one port behind the client — where a prepared job goes, and what answers
for jobs once they are there.

The client checks, builds and passes a job through its middleware (``client.py``); what
it then calls is a ``Backend``: ``RedisBackend`` here (the Store's moves, one script per
move), or the testing fake's (``testing/harness.py``), which a ``jobs.testing.fake()``
block swaps in for the block. Nothing in product code asks which one it holds: a fake
that needs a branch of its own in the client is a fake that can drift. The same
behaviour suites run over both (``tests/conformance``).

Pausing a queue (``jobs.queues``) and a limiter entered outside a job go through the
port too (``pause``/``resume``/``pauses``, ``limit_store``): the fake keeps its own
pauses and limiter holders, so a web handler under test that rate-limits a call, or a
test that pauses a queue, never reaches Redis in a block. What only Redis does (the
admin and dashboard reads) goes through ``Backend.store()``: the fake does not claim
it, and raises ``NotFaked`` there (``testing/records.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from anyio.from_thread import BlockingPortal

from cogworker_async import environment
from cogworker_async.enqueue import after as dependents
from cogworker_async.enqueue.lookup import JobLookup, QueueHints
from cogworker_async.redis.errors import RedisError
from cogworker_async.redis.limits import LimitStore
from cogworker_async.redis.pausing import Pause
from cogworker_async.redis.store import Store
from cogworker_async.redis.unreachable import not_connected, unreachable
from cogworker_async.settings import Settings

if TYPE_CHECKING:
    from cogworker_async.jobs.context import OpenBatch
    from cogworker_async.jobs.definition import JobOptions
    from cogworker_async.jobs.status import CancelOutcome, JobStatus
    from cogworker_async.workflows.batch import BatchBackend

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Push:
    """One prepared job on its way to the backend."""

    queue: str
    raw: bytes
    jid: str
    unique: tuple[str, float] | None = None
    """(digest, ttl) when a unique lock must be taken with the push."""


@dataclass(frozen=True, slots=True)
class DedupCall:
    """One dedup enqueue, decided at the caller: what the backend takes with the push."""

    mode: str
    """``throttle``, ``debounce`` or ``coalesce``."""
    seconds: float
    key: str
    """The digest the mode keeps its rule under."""
    name: str
    epoch: float | None
    """Due at (epoch s), for a throttled job enqueued at a time."""
    later: float | None
    """Due in (s), for a throttled job enqueued with a delay."""
    due: float | None
    """When it may first start (epoch s; None: now)."""
    jid_at: int
    """Where a merge writes its jid into the raw payload."""



class Home(Protocol):
    """What ``RedisBackend`` needs of its client (``client.Client``)."""

    settings: Settings
    queue_hints: QueueHints

    def store(self) -> Store: ...

    def private_loop(self) -> BlockingPortal: ...


class Backend(Protocol):
    """What the client and the App call once a job is prepared. ``chosen`` is always
    ``options.jid is not None``: a chosen jid is refused while it is alive."""

    async def push(self, name: str, options: JobOptions, push: Push, epoch: float | None,
                   seconds: float | None, bid: str | None) -> str | None:
        """Enqueue now, at ``epoch`` or in ``seconds``; the jid, or None if refused (a
        unique job's lock is held, a chosen jid is alive)."""

    async def push_many(self, name: str, queue: str, pushes: Sequence[Push],
                        bid: str | None) -> set[str]:
        """Enqueue many now (no chosen jids); the jids refused by a held unique lock."""

    async def wait(self, name: str, options: JobOptions, push: Push,
                   batch: OpenBatch | None) -> bool:
        """Take a job that runs after ``options.after`` (``after.py``); False: refused."""

    async def dedup(self, push: Push, options: JobOptions, call: DedupCall) -> str | None:
        """Take a job of a dedup mode (``dedup_push.py``): the jid that runs it, or None."""

    def run_sync(self, enqueue: Callable[[], Awaitable[str | None]]) -> str | None:
        """Run ``enqueue`` to its end from code that is not async (``enqueue_sync``)."""

    async def status(self, jid: str, queue: str | None) -> JobStatus: ...

    async def result(self, jid: str, timeout: float | None,  # noqa: ASYNC109
                     queue: str | None) -> Any: ...

    async def cancel(self, jid: str, queue: str | None) -> CancelOutcome: ...

    def batches(self) -> BatchBackend:
        """Where batches are kept (``workflows/batch.py``'s port)."""

    def limit_store(self) -> LimitStore:
        """Where a limiter entered outside a job decides (``limits/limiter.py``): the
        Store, or the fake's in-memory one (``testing/memory.py``)."""

    async def pause(self, queue: str) -> bool:
        """Pause ``queue`` (``redis/pausing.py``); False if it was paused already."""

    async def resume(self, queue: str) -> bool:
        """Resume ``queue``; False if it was not paused."""

    async def pauses(self, queues: Sequence[str] | None,
                     own: Sequence[str]) -> dict[str, Pause]:
        """The paused queues among ``queues`` (None: every known queue and ``own``)."""

    def store(self) -> Store:
        """The Store, for what only Redis does (the admin reads): the fake raises
        ``NotFaked``, never answers differently."""


class RedisBackend:
    """The Backend of Redis: this event loop's Store (``Client.store``)."""

    def __init__(self, client: Home) -> None:
        self._client = client
        self._policy_checked = False
        self.lookup = JobLookup(client.store, client.settings.tracked, client.queue_hints)

    async def push(self, name: str, options: JobOptions, push: Push, epoch: float | None,
                   seconds: float | None, bid: str | None) -> str | None:
        try:
            return await self._push(name, options, push, epoch, seconds, bid)
        except Exception as exc:
            self._if_unreachable(exc)
            raise

    async def _push(self, name: str, options: JobOptions, push: Push, epoch: float | None,
                    seconds: float | None, bid: str | None) -> str | None:
        store = self._client.store()
        if not self._policy_checked:
            await self._warn_if_evicting(store)
        chosen = options.jid is not None
        if chosen and await _alive_elsewhere(store, push.queue, push.jid):
            return duplicate(push.jid)
        jids = [push.jid]
        if push.unique is not None:
            digest, ttl = push.unique
            if not await store.enqueue_unique(digest, push.jid, ttl, push.queue, push.raw,
                                              at=epoch, delay=seconds, name=name,
                                              chosen=chosen, batch=bid):
                log.debug("%s: a unique job with the same digest (or jid) is already "
                          "enqueued", name)
                return None
        elif epoch is not None or seconds is not None:
            if await store.schedule(push.queue, [push.raw], at=epoch, delay=seconds,
                                    jids=jids, name=name, chosen=chosen, batch=bid) < 0:
                return duplicate(push.jid)
        elif await store.enqueue(push.queue, [push.raw], jids=jids, name=name,
                                 chosen=chosen, batch=bid) < 0:
            return duplicate(push.jid)
        return push.jid

    async def push_many(self, name: str, queue: str, pushes: Sequence[Push],
                        bid: str | None) -> set[str]:
        try:
            return await self._push_many(name, queue, pushes, bid)
        except Exception as exc:
            self._if_unreachable(exc)
            raise

    async def _push_many(self, name: str, queue: str, pushes: Sequence[Push],
                         bid: str | None) -> set[str]:
        store = self._client.store()
        if not self._policy_checked:
            await self._warn_if_evicting(store)
        plain = [p for p in pushes if p.unique is None]
        locked = [p for p in pushes if p.unique is not None]
        taken = await store.push_batch(
            queue, [p.raw for p in plain],
            [(p.unique[0], p.jid, p.unique[1], p.raw) for p in locked if p.unique],
            jids=[p.jid for p in plain], name=name, batch=bid)
        return {p.jid for p, ok in zip(locked, taken, strict=True) if not ok}

    async def wait(self, name: str, options: JobOptions, push: Push,
                   batch: OpenBatch | None) -> bool:
        client = self._client
        try:
            return await dependents.wait(client.store(), JobLookup(client.store, True,
                                                                   client.queue_hints),
                                         options, push, name=name, batch=batch,
                                         max_bytes=client.settings.max_payload_bytes)
        except Exception as exc:
            self._if_unreachable(exc)
            raise

    async def dedup(self, push: Push, options: JobOptions, call: DedupCall) -> str | None:
        try:
            return await dedup_push(self._client.store(), push, call)
        except Exception as exc:
            self._if_unreachable(exc)
            raise

    def _if_unreachable(self, exc: Exception) -> None:
        """Raise ``RedisUnreachable`` from ``exc`` when no connection could be made
        (issue 45: name the URL, where it came from, what to do); else return, for the
        caller to re-raise ``exc`` as it was. Only ever called in an ``except`` branch:
        a push that succeeds pays nothing."""
        url = self._client.store().url
        if url is not None and not_connected(exc):
            raise unreachable(exc, url, *url_source(self._client.settings)) from exc

    def run_sync(self, enqueue: Callable[[], Awaitable[str | None]]) -> str | None:
        jid: str | None = self._client.private_loop().call(enqueue)
        return jid

    async def status(self, jid: str, queue: str | None) -> JobStatus:
        return await self.lookup.status(jid, queue=queue)

    async def result(self, jid: str, timeout: float | None,  # noqa: ASYNC109
                     queue: str | None) -> Any:
        return await self.lookup.result(jid, timeout=timeout, queue=queue)

    async def cancel(self, jid: str, queue: str | None) -> CancelOutcome:
        return await self.lookup.cancel(jid, queue=queue)

    def batches(self) -> BatchBackend:
        return self._client.store().batches

    def limit_store(self) -> LimitStore:
        return self._client.store()

    async def pause(self, queue: str) -> bool:
        return await self._client.store().pause(queue)

    async def resume(self, queue: str) -> bool:
        return await self._client.store().resume(queue)

    async def pauses(self, queues: Sequence[str] | None,
                     own: Sequence[str]) -> dict[str, Pause]:
        store = self._client.store()
        names = [*await store.queue_names(), *own] if queues is None else list(queues)
        return await store.pauses(list(dict.fromkeys(names)))

    def store(self) -> Store:
        return self._client.store()

    async def _warn_if_evicting(self, store: Store) -> None:
        """Once per client, at its first enqueue: Redis set to evict keys under memory
        pressure drops queued jobs silently, and an enqueuing process may never see a
        worker's log (tests/worker/test_eviction_warning.py)."""
        self._policy_checked = True
        try:
            policy = await store.eviction_policy()
        except RedisError:  # never a reason to refuse the enqueue: the push says
            return
        if policy not in (None, "noeviction"):
            log.warning("Redis maxmemory-policy is %r: under memory pressure Redis evicts "
                        "keys, and queued jobs vanish without a trace. Set it to "
                        "'noeviction'.", policy)


def url_source(settings: Settings) -> tuple[str, str]:
    """Where the App's URL came from (as ``App._pick_url`` chose it), and what to do
    when nothing answers there."""
    if settings.redis_url:
        return ("App(redis_url=...)", "Is Redis running there, and is the URL right? "
                "Start it, or pass the right URL to App(redis_url=...).")
    if environment.redis_url():
        return (f"${environment.REDIS_URL}", "Is Redis running there, and is the URL "
                f"right? Start it, or set {environment.REDIS_URL} to the right URL.")
    return ("the embedded server (no App(redis_url=...), no "
            f"${environment.REDIS_URL})", "Is it still running? `cogworker-async embedded "
            "status` says; `cogworker-async embedded stop` and a new start replace it. Or "
            f"point {environment.REDIS_URL} at a Redis you run.")


def duplicate(jid: str) -> str | None:
    """An enqueue's answer for a chosen jid that is alive: None, as for a unique job's
    duplicate."""
    log.debug("jid %s is already queued, scheduled, running or retrying: not enqueued", jid)
    return None


async def _alive_elsewhere(store: Store, queue: str, jid: str) -> bool:
    """Whether a chosen jid is alive in another queue than the one it is pushed on (the
    push's own script checks its queue, atomically). Records live in their queue's slot,
    so this look is a step of its own: two enqueues of one chosen jid onto two different
    queues at the same instant can both pass it (the only window left; documented). A
    registered queue's record read per queue, pipelined."""
    others = [name for name in await store.queue_names() if name != queue]
    return bool(others) and bool(await store.alive_in(jid, others))


async def dedup_push(store: Store, push: Push, call: DedupCall) -> str | None:
    """The Redis side of ``dedup_push.enqueue``: the mode's script (``redis/dedup.py``)."""
    if call.mode == "throttle":
        taken = await store.dedup.throttle(call.key, push.jid, call.seconds, push.queue,
                                           push.raw, at=call.epoch, delay=call.later,
                                           name=call.name)
        return push.jid if taken else None
    if call.mode == "debounce":
        return (await store.dedup.debounce(call.key, push.jid, call.seconds, push.queue,
                                           push.raw, name=call.name, jid_at=call.jid_at))[1]
    return (await store.dedup.coalesce(call.key, push.jid, push.queue, push.raw,
                                       name=call.name, jid_at=call.jid_at))[1]
