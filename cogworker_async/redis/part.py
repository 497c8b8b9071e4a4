"""What every part of the Store shares: the connection, the namespace's keys, the
script runner and the bounds the moves apply.

The Store (``store.py``) is a facade over parts, one per concern — moves, queues,
processes, records, stats, locks, pauses — each a plain class over one ``Shared``, so
that each file reads in one sitting and a part sees only what it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Concatenate, Final, Generic, Literal, ParamSpec, TypeVar, overload

import redis.asyncio

from cogworker_async.redis.connection import is_cluster
from cogworker_async.redis.errors import ResponseError
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.scripts import Scripts
from cogworker_async.settings import DEAD_MAX_AGE, DEAD_MAX_JOBS, KEEP_STATUS

SetName = Literal["retry", "dead", "schedule"]

P = ParamSpec("P")
R = TypeVar("R")


class Via(Generic[P, R]):
    """A facade's operation that is one of its parts': ``Via("moves", Moves.enqueue)`` on
    the Store is ``store.moves.enqueue``, with its signature. Read on the class, it is
    still callable with the facade first (``Store.enqueue(store, ...)``), so a test can
    wrap the operation as it wraps a method."""

    def __init__(self, part: str, operation: Callable[Concatenate[Any, P], R]) -> None:
        self.part = part
        self.name = operation.__name__

    @overload
    def __get__(self, facade: None, owner: type) -> Via[P, R]: ...
    @overload
    def __get__(self, facade: object, owner: type) -> Callable[P, R]: ...

    def __get__(self, facade: object | None, owner: type) -> Any:
        if facade is None:
            return self
        return getattr(getattr(facade, self.part), self.name)

    def __call__(self, facade: object, *args: P.args, **kwargs: P.kwargs) -> R:
        operation: Callable[P, R] = getattr(getattr(facade, self.part), self.name)
        return operation(*args, **kwargs)


@dataclass(frozen=True, slots=True)
class DeadLimits:
    """The dead set's bounds, applied by every script that files into it."""

    max_jobs: int = DEAD_MAX_JOBS
    max_age: float = DEAD_MAX_AGE


DEFAULT_DEAD_LIMITS: Final = DeadLimits()


@dataclass(slots=True)
class Shared:
    """One namespace on one server, as every part speaks to it. Mutable: a test (or an
    admin tool) that changes a bound changes it for every part at once."""

    client: redis.asyncio.Redis
    keys: Keys
    scripts: Scripts
    dead_limits: DeadLimits = DEFAULT_DEAD_LIMITS
    keep_status: float = KEEP_STATUS
    """Seconds a finished job's status record is kept (``Settings.keep_status``)."""
    track_jobs: bool = True
    """Keep a status record per job (``Settings.track_jobs``)."""
    cluster: bool = False
    """Keys of different queues may live on different nodes: one script per slot."""

    @classmethod
    def over(cls, client: redis.asyncio.Redis, keys: Keys, scripts: Scripts,
             **bounds: Any) -> Shared:
        return cls(client, keys, scripts, cluster=is_cluster(client), **bounds)


class Part:
    """A part of the Store: its operations read the shared state through here."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    @property
    def client(self) -> redis.asyncio.Redis:
        return self.shared.client

    @property
    def keys(self) -> Keys:
        return self.shared.keys

    @property
    def scripts(self) -> Scripts:
        return self.shared.scripts

    @property
    def track_jobs(self) -> bool:
        return self.shared.track_jobs

    @property
    def keep_status(self) -> float:
        return self.shared.keep_status

    @property
    def cluster(self) -> bool:
        return self.shared.cluster

    def record_prefix(self, queue: str) -> str:
        """What scripts prefix jids with to name their records: "" (none written) when
        jobs are not tracked."""
        return self.keys.record_prefix(queue) if self.track_jobs else ""

    def zset_key(self, queue: str, target: SetName) -> str:
        """The key of ``queue``'s ``schedule``, ``retry`` or ``dead`` set."""
        keys = self.keys
        return {"retry": keys.retry, "dead": keys.dead, "schedule": keys.schedule}[target](queue)

    def trim(self, target: SetName) -> list[str]:
        """The two trailing script arguments that bound the dead set when ``target`` is
        it (see ``lua/_dead.lua``); "0" otherwise."""
        if target != "dead":
            return ["0", "0"]
        limits = self.shared.dead_limits
        return [str(limits.max_jobs), repr(float(limits.max_age))]


def as_bytes(value: bytes | str) -> bytes:
    """A reply's member or key as bytes (decoded replies come back as ``str``)."""
    return value.encode() if isinstance(value, str) else bytes(value)


def as_list(reply: Any) -> list[Any]:
    return list(reply) if isinstance(reply, list | tuple) else []


def wrong_type(error: Exception) -> bool:
    """A key of another type than the command's (a co-tenant's key, a hand's SET)."""
    return isinstance(error, ResponseError) and str(error).startswith("WRONGTYPE")
