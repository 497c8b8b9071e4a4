"""Limits: the Redis side of the rate limiters (``cogworker_async/limits/limiter.py``).

Every decision is one script, by Redis TIME (``lua/limit_*.lua``): a slot of a
concurrent limiter, an acquisition in a fixed window, a token of a bucket. All of a
limiter's keys live in the namespace's slot (``Keys.limiter``), beside the processes'
alive markers, so that the concurrent script can see that a holder's process is gone
and free its slot in the step that would otherwise refuse: a slot dies with its process
(SIGKILL, OOM, a stop), bounded by the alive marker's TTL (``orphan_threshold``), with
no TTL guessed for the hold itself.

What a holder is, as stored (a member of the holders zset; ``limit_concurrent.lua``
parses the same format): ``"<identity>\\t<jid>\\t<token>"`` for a job of a worker, whose
process's alive marker is ``Keys.process(identity)``; ``"\\t<jid>\\t<token>\\t<lease s>"``
for a caller outside any worker (no process beats for it: freed once its lease has run
out). The token makes each acquisition's member unique, so a release takes back exactly
its own slot and a repeated call adds nothing twice.

Every key is bounded: the holders zset holds at most N members (and expires when idle
for ``HOLDERS_IDLE_TTL``), the window and bucket hashes expire with their window or
when full again, the over-limit counters after ``OVER_TTL``, and the registry of
limiters holds one field per limiter name defined in code.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import redis.exceptions

from cogworker_async.jobs import stored
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.part import as_bytes

if TYPE_CHECKING:
    from cogworker_async.redis.store import Store

log = logging.getLogger(__name__)


class ScriptRunner(Protocol):
    async def run(self, name: str, keys: Sequence[str], args: Sequence[Any], *,
                  durable: bool = False) -> Any: ...


class LimitStore(Protocol):
    """What a limiter's decisions need of the Store (the in-memory one of
    ``cogworker_async.testing`` is one too): its keys, its script runner and, to give a
    slot back and count a refusal, its client."""

    @property
    def keys(self) -> Keys: ...
    @property
    def scripts(self) -> ScriptRunner: ...
    @property
    def client(self) -> Any: ...

Kind = Literal["concurrent", "window", "bucket"]


@dataclass(frozen=True, slots=True)
class LimitSpec:
    """What a limiter allows: ``capacity`` holders at once (concurrent), acquisitions
    per window of ``seconds`` (window), or a bucket of ``capacity`` tokens refilled
    over ``seconds`` (bucket)."""

    kind: Kind
    capacity: int
    seconds: float | None = None

HOLDERS_IDLE_TTL: Final = 7 * 24 * 3600
"""Seconds a concurrent limiter's holders key lives after the last call that took or
asked for a slot: a limiter nobody uses any more leaves nothing behind. A process
holding a slot that long with nobody else asking loses it (the documented bound)."""

OVER_MINUTE: Final = 60
"""Seconds per over-limit counter: refusals are counted per minute of Redis TIME."""
OVER_TTL: Final = 3 * OVER_MINUTE
"""Seconds an over-limit counter is kept: read during its minute and the next."""

SEPARATOR: Final = "\t"
"""Between a holder's fields (a jid is printable, so never holds one)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What a limiter script said."""

    admitted: bool
    level: int
    """After the call: holders (concurrent), acquisitions in the window, or whole tokens
    left (bucket)."""
    retry_after: float | None
    """Seconds until it may admit again (a window's end, a bucket's next token); None
    when it cannot tell (a concurrent limiter: a holder may leave at any time)."""
    now: float
    """Redis TIME of the decision (epoch s)."""
    freed: int = 0
    """Slots of holders whose process was gone, freed by this call (concurrent)."""
    granted: int = 1
    """How many of the acquisitions asked for in the call were admitted (the first
    ones): a window's or a bucket's call may ask for several."""


@dataclass(frozen=True, slots=True)
class LimiterUsage:
    """One limiter as the dashboard and the CLI show it (``limiter_usage``)."""

    name: str
    kind: str
    """``concurrent``, ``window`` or ``bucket``."""
    capacity: int
    seconds: float | None
    """The window's length, or the time to refill a bucket (None: concurrent)."""
    in_use: int
    """Live holders (concurrent), acquisitions in the current window, or tokens spent
    (a bucket's capacity less the whole tokens it has now)."""
    over_recent: int
    """Refusals counted in this minute and the last (Redis TIME)."""


def holder_member(identity: str | None, jid: str, token: str, lease: float) -> str:
    """The holders-zset member of one acquisition: a worker's (``identity``: its slot
    lives as long as its process) or, with no identity, a caller's with a ``lease``."""
    if identity is not None and (SEPARATOR in identity or identity == ""):
        raise ValueError(f"a process identity used by a limiter cannot be empty or hold a "
                         f"tab: {identity!r}")
    jid = jid.replace(SEPARATOR, " ")
    if identity is None:
        return SEPARATOR.join(["", jid, token, repr(float(lease))])
    return SEPARATOR.join([identity, jid, token])


def identity_of(member: bytes | str) -> str | None:
    """The process identity of a holder (None: a lease, or not a member of ours)."""
    text = member.decode("utf-8", "replace") if isinstance(member, bytes) else member
    fields = text.split(SEPARATOR)
    return fields[0] if len(fields) == 3 and fields[0] else None


def _decision(reply: Any, *, timed: bool) -> Decision:
    admitted, level, extra, now = reply
    retry_after = None
    freed = 0
    if timed:
        retry_after = int(extra) / 1000 if int(extra) > 0 else None
    else:
        freed = int(extra)
    granted = int(admitted)
    return Decision(granted > 0, int(level), retry_after, float(now), freed, granted)


async def take_slot(store: LimitStore, name: str, capacity: int, member: str) -> Decision:
    """Take a slot of concurrent limiter ``name`` for ``member`` if fewer than
    ``capacity`` hold one (``lua/limit_concurrent.lua``)."""
    return (await take_slots(store, name, capacity, [member]))[0]


async def take_slots(store: LimitStore, name: str, capacity: int,
                     members: Sequence[str]) -> list[Decision]:
    """Take a slot for each of ``members``, in order, in one script call: the decision of
    each (the first refused once the limiter is full)."""
    keys = store.keys
    reply = await store.scripts.run("limit_concurrent", [keys.limiter(name, "holders")], [
        capacity, members[0], keys.process(""), repr(time.time()), HOLDERS_IDLE_TTL,
        *members[1:]])
    level, freed, now = int(reply[1]), int(reply[2]), float(reply[3])
    flags = reply[4].decode() if isinstance(reply[4], bytes) else str(reply[4])
    return [Decision(flag == "1", level, None, now, freed if i == 0 else 0, int(flag == "1"))
            for i, flag in enumerate(flags[:len(members)])]


async def release_slot(store: LimitStore, name: str, member: str) -> None:
    """Give back ``member``'s slot (idempotent: a slot freed already stays freed)."""
    await store.client.zrem(store.keys.limiter(name, "holders"), member)


async def release_slots(store: LimitStore, name: str, members: Sequence[str]) -> None:
    """Give back the slots of ``members`` (idempotent), in one command."""
    await store.client.zrem(store.keys.limiter(name, "holders"), *members)


async def take_window(store: LimitStore, name: str, capacity: int, seconds: float,
                      wanted: int = 1) -> Decision:
    """Count ``wanted`` acquisitions in window limiter ``name`` as far as its window has
    room: ``Decision.granted`` of them (``admitted``: at least one)."""
    reply = await store.scripts.run("limit_window", [store.keys.limiter(name, "window")],
                                    [capacity, repr(float(seconds)), repr(time.time()),
                                     wanted])
    return _decision(reply, timed=True)


async def take_token(store: LimitStore, name: str, capacity: int, seconds: float,
                     wanted: int = 1) -> Decision:
    """Take up to ``wanted`` tokens of bucket limiter ``name``: ``Decision.granted``."""
    reply = await store.scripts.run("limit_bucket", [store.keys.limiter(name, "bucket")],
                                    [capacity, repr(float(seconds)), repr(time.time()),
                                     wanted])
    return _decision(reply, timed=True)


def _minute(now: float) -> int:
    return int(now // OVER_MINUTE)


async def count_over(store: LimitStore, name: str, now: float) -> None:
    """Count one refusal of limiter ``name`` in the minute of ``now`` (Redis TIME, from
    the refusing script's reply)."""
    key = store.keys.limiter(name, f"over:{_minute(now)}")
    async with store.client.pipeline(transaction=False) as pipe:
        pipe.incr(key)
        pipe.expire(key, OVER_TTL)
        await pipe.execute()


def spec_text(spec: LimitSpec) -> str:
    """A limiter's entry in the registry (``Keys.limiters``)."""
    return json.dumps({"kind": spec.kind, "capacity": spec.capacity,
                       "seconds": spec.seconds}, sort_keys=True)


async def register(store: Store, specs: Mapping[str, LimitSpec], identity: str) -> None:
    """Write ``specs`` into the registry of limiters (one HSET), and free the slots a
    previous process of the same ``identity`` held (a configured identity is reused by
    the next run of a process: its alive marker would make a dead run's holders look
    alive). Called by a worker at start, before its first job: it holds nothing yet."""
    if not specs:
        return
    keys = store.keys
    concurrent = [name for name, spec in specs.items() if spec.kind == "concurrent"]
    async with store.client.pipeline(transaction=False) as pipe:
        pipe.hset(keys.limiters, mapping={name: spec_text(spec) for name, spec in specs.items()})
        for name in concurrent:
            pipe.zrange(keys.limiter(name, "holders"), 0, -1)
        replies = await pipe.execute(raise_on_error=False)
    stale = [(name, as_bytes(member)) for name, members in zip(concurrent, replies[1:],
                                                               strict=True)
             if isinstance(members, list) for member in members
             if identity_of(member) == identity]
    if stale:
        async with store.client.pipeline(transaction=False) as pipe:
            for name, member in stale:
                pipe.zrem(keys.limiter(name, "holders"), member)
            await pipe.execute(raise_on_error=False)
        log.info("freed %d limiter slots held by an earlier process named %s",
                 len(stale), identity)


async def registered(store: Store) -> dict[str, dict[str, Any]]:
    """name -> its registry entry (kind, capacity, seconds); unreadable entries left out."""
    found = {}
    try:
        entries = await store.client.hgetall(store.keys.limiters)
    except redis.exceptions.ResponseError as exc:  # a key of another type: none listed
        if isinstance(exc, redis.exceptions.NoPermissionError):
            raise
        log.warning("the limiter registry is unreadable: %s", exc)
        return {}
    for name, text in entries.items():
        entry = stored.json_object(text)  # damaged (too deep, not UTF-8...): left out
        if entry is not None:
            found[as_bytes(name).decode("utf-8", "replace")] = entry
    return found


async def limiter_usage(store: Store,
                        names: Collection[str] | None = None) -> dict[str, LimiterUsage]:
    """In use, capacity and recent refusals of each limiter in ``names`` (default: every
    registered one) that a worker has registered; read-only (a dead holder still listed
    is not counted: it is freed by the next acquisition that needs its slot)."""
    specs = await registered(store)
    wanted = [name for name in (names if names is not None else sorted(specs)) if name in specs]
    if not wanted:
        return {}
    seconds_now, micros = await store.client.time()
    now = int(seconds_now) + int(micros) / 1_000_000
    keys = store.keys
    minute = _minute(now)
    async with store.client.pipeline(transaction=False) as pipe:
        for name in wanted:
            kind = specs[name].get("kind")
            if kind == "concurrent":
                pipe.zrange(keys.limiter(name, "holders"), 0, -1, withscores=True)
            else:
                pipe.hgetall(keys.limiter(name, "window" if kind == "window" else "bucket"))
            pipe.mget([keys.limiter(name, f"over:{minute}"),
                       keys.limiter(name, f"over:{minute - 1}")])
        replies = await pipe.execute(raise_on_error=False)
    states = replies[0::2]
    alive = await _alive(store, [state for name, state in zip(wanted, states, strict=True)
                                 if specs[name].get("kind") == "concurrent"])
    found = {}
    for name, state, over in zip(wanted, states, replies[1::2], strict=True):
        spec = specs[name]
        kind, capacity = str(spec.get("kind")), _int(spec.get("capacity"))
        seconds = stored.number(spec.get("seconds"))  # infinite, huge, a string: None
        found[name] = LimiterUsage(
            name, kind, capacity, seconds,
            in_use=_in_use(kind, capacity, seconds, state, now, alive),
            over_recent=sum(_int(value) for value in over) if isinstance(over, list) else 0)
    return found


async def _alive(store: Store, states: Sequence[Any]) -> set[str]:
    """The identities, among the holders in ``states``, whose process is alive."""
    identities = sorted({identity for state in states if isinstance(state, list)
                         for member, _ in state
                         if (identity := identity_of(member)) is not None})
    if not identities:
        return set()
    async with store.client.pipeline(transaction=False) as pipe:
        for identity in identities:
            pipe.pttl(store.keys.process(identity))  # alive: with a beat's TTL
        replies = await pipe.execute(raise_on_error=False)
    return {identity for identity, reply in zip(identities, replies, strict=True)
            if isinstance(reply, int) and reply > 0}


def _int(value: Any) -> int:
    """A stored count or capacity; 0 when damaged (not a number, infinite, huge)."""
    return stored.integer(value) or 0


def _field(state: Mapping[Any, Any], name: str) -> float | None:
    return stored.number(state.get(name.encode(), state.get(name)))


def _in_use(kind: str, capacity: int, seconds: float | None, state: Any, now: float,
            alive: set[str]) -> int:
    """How much of a limiter is taken at ``now``, from its stored state (as the scripts
    read it)."""
    if kind == "concurrent":
        if not isinstance(state, list):
            return 0
        return sum(1 for member, taken in state
                   if (at := stored.number(taken)) is not None and _holds(member, at, now, alive))
    if not isinstance(state, dict) or not seconds:
        return 0
    if kind == "window":
        window = _field(state, "window")
        same = window is not None and window == now // seconds
        return _int(_field(state, "count")) if same else 0
    tokens, stamp = _field(state, "tokens"), _field(state, "stamp")
    if tokens is None or stamp is None:
        return 0
    tokens = min(capacity, tokens + max(0.0, now - stamp) * capacity / seconds)
    return capacity - int(tokens)


def _holds(member: bytes | str, taken: float, now: float, alive: set[str]) -> bool:
    identity = identity_of(member)
    if identity is not None:
        return identity in alive
    fields = as_bytes(member).decode("utf-8", "replace").split(SEPARATOR)
    lease = stored.number(fields[3]) if len(fields) == 4 else None
    return lease is not None and not fields[0] and taken + lease >= now
