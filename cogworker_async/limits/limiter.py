"""Limiters: at most N at once, N per window, or a token bucket — across every process.

    payments = jobs.limiter("payments", concurrent=5)
    emails = jobs.limiter("emails", per_window=(100, 60), wait=2)
    search = jobs.limiter("search", bucket=(10, 1))

    @jobs.job()
    async def charge(order_id: int) -> None:
        async with payments:          # OverLimit if no slot came within its wait
            await gateway.charge(order_id)

Every decision is one script in Redis, by Redis TIME (``redis/limits.py``): no host's
clock counts, and no two processes can both take the last slot. A concurrent slot is
held by (process identity, jid): it lives as long as the process's alive marker, so a
SIGKILLed holder's slot is free again once its marker has expired (``orphan_threshold``
after its last beat: the recovery bound), and a process that stops deletes its marker.

Over the limit, ``async with`` polls with a short jittered backoff (never spinning; a
window or a bucket says when it will admit again) for up to ``wait`` seconds, then
raises ``OverLimit``. In a worker, the job is then rescheduled (``worker/outcome.py``):
it counts neither a failure nor a retry, up to ``max_limit_reschedules`` times.

Only async jobs can use a limiter (``async with``): a plain-function job cannot.
Outside a worker, a concurrent slot is held on a lease (``lease`` seconds, default
``DEFAULT_LEASE``): no process beats for the caller, so a caller that dies holding it
frees it only when the lease runs out — and one holding it longer than its lease may
see it taken by another.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import re
import secrets
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final

import anyio

from cogworker_async.errors import OverLimit, why
from cogworker_async.jobs.context import CURRENT
from cogworker_async.limits.calls import LimitCalls
from cogworker_async.redis import limits
from cogworker_async.redis.limits import Decision, LimiterUsage, LimitStore, limiter_usage
from cogworker_async.redis.limits import Kind as Kind  # where a limit is described
from cogworker_async.redis.limits import LimitSpec as LimitSpec

__all__ = ["RUNNER", "LimitSpec", "Limiter", "LimiterUsage", "Runner", "limiter_usage",
           "next_pause", "spec_of"]

log = logging.getLogger(__name__)


MAX_CAPACITY: Final = 1_000_000
"""Largest N: a concurrent limiter's script may look at every holder when it is full."""
MAX_SECONDS: Final = 366 * 24 * 3600.0
"""Longest window, refill time, wait or lease: a year (a typo must not mean forever)."""
MIN_PERIOD: Final = 0.001
"""Shortest window or refill time, in seconds (the scripts' TTLs are milliseconds)."""
DEFAULT_LEASE: Final = 300.0
"""Seconds a concurrent slot taken outside any worker is held at most."""

FIRST_POLL: Final = 0.01
"""Seconds before the second try of a limiter that is full (then doubling)."""
MAX_POLL: Final = 0.25
"""Longest pause between two tries while waiting for a slot."""
POLL_JITTER: Final = 0.5
"""Each pause is drawn within +/- this fraction, so waiters don't try in lockstep."""

RELEASE_ATTEMPTS: Final = 3
RELEASE_PAUSE: Final = 0.1
"""Seconds before a release is tried again (then twice that)."""

_NAME: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,128}", re.ASCII)


@dataclass(frozen=True, slots=True)
class Runner:
    """The worker process running the current job: its limiters' slots are held in its
    name (``identity``) and go with it."""

    store: LimitStore
    identity: str
    unreleased: set[tuple[str, str]] = field(default_factory=set)
    """(limiter, member) whose release met Redis away: a live process's slot is never
    freed by anyone else, so they are released again by ``release_late`` (each upkeep
    pass, and before each acquisition) until Redis takes it."""

    calls: LimitCalls = field(init=False)
    """Its jobs' limiter calls, batched (``limits/calls.py``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "calls", LimitCalls(self.store, self.unreleased))

    async def release_late(self) -> None:
        """Release what could not be released when its job left the limiter."""
        for name, member in list(self.unreleased):
            await limits.release_slot(self.store, name, member)  # RedisError: next time
            self.unreleased.discard((name, member))
            log.info("released a slot of limiter %r late (Redis was away)", name)


RUNNER: ContextVar[Runner] = ContextVar("cogworker_runner")

_Held = tuple[LimitStore, str, Runner | None]
"""What an entered limiter holds: the store, its member, the runner it holds it for."""
"""Set by the processor around each run (``worker/processor.py``)."""


def check_name(name: object) -> str:
    """``name`` if it can name a limiter (it goes into key names), else a clear error."""
    if not isinstance(name, str):
        raise TypeError(f"a limiter name must be a str, not {type(name).__name__}")
    if not _NAME.fullmatch(name):
        raise ValueError(f"invalid limiter name {name!r}: use 1-128 letters, digits, '_', "
                         "'-', '.', ':'")
    return name


def _capacity(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_CAPACITY:
        raise ValueError(f"{what} must be between 1 and {MAX_CAPACITY:,}, got {value}")
    return value


def check_seconds(what: str, value: object, *, allow_zero: bool = False) -> float:
    """A duration: a finite number of seconds, > 0 (or >= 0), at most a year."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    low_ok = seconds >= 0 if allow_zero else seconds > 0
    if not math.isfinite(seconds) or not low_ok or seconds > MAX_SECONDS:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{what} must be a finite number of seconds {bound} and at most "
                         f"a year, got {value!r}")
    return seconds


def _pair(what: str, value: object) -> tuple[int, float]:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise TypeError(f"{what} must be a pair (N, seconds), not {value!r}")
    seconds = check_seconds(f"{what}'s seconds", value[1])
    if seconds < MIN_PERIOD:
        # The scripts count in milliseconds: a shorter window has no end they can set
        # (every acquisition failed in Redis and left the window's key with no TTL).
        raise ValueError(f"{what}'s seconds must be at least {MIN_PERIOD} (a millisecond), "
                         f"got {value[1]!r}")
    return _capacity(f"{what}'s N", value[0]), seconds


def spec_of(concurrent: object = None, per_window: object = None,
            bucket: object = None) -> LimitSpec:
    """The spec of exactly one of ``concurrent=N``, ``per_window=(N, seconds)``,
    ``bucket=(N, seconds)``; a ValueError or TypeError naming the problem otherwise."""
    given = [kind for kind, value in (("concurrent", concurrent), ("per_window", per_window),
                                      ("bucket", bucket)) if value is not None]
    if len(given) != 1:
        raise ValueError("a limiter takes exactly one of concurrent=N, per_window=(N, "
                         f"seconds) or bucket=(N, seconds); got {given or 'none'}")
    if concurrent is not None:
        return LimitSpec("concurrent", _capacity("concurrent", concurrent))
    if per_window is not None:
        return LimitSpec("window", *_pair("per_window", per_window))
    return LimitSpec("bucket", *_pair("bucket", bucket))


def next_pause(tries: int, retry_after: float | None, remaining: float,
               rng: random.Random | None = None) -> float | None:
    """How long to wait before trying a full limiter again (``tries`` made so far), or
    None to give up: no time left, or it will not admit before ``remaining`` is over
    (``retry_after``: when it says it may). Never 0: waiting never spins."""
    if remaining <= 0 or (retry_after is not None and retry_after > remaining):
        return None
    draw = (rng or random).uniform(1 - POLL_JITTER, 1 + POLL_JITTER)
    backoff = min(MAX_POLL, FIRST_POLL * 2 ** min(tries, 16)) * draw
    if retry_after is not None:  # a window's end, a bucket's next token: just after it
        backoff = retry_after + FIRST_POLL * draw
    return float(min(remaining, backoff))


class Limiter:
    """A limiter of an App (``App.limiter``): ``async with limiter:`` holds a slot (or
    takes an acquisition, or a token) for the block, or raises ``OverLimit``.

    One object serves every task at once: each ``async with`` is its own acquisition
    (the slot it holds is kept per task, in a context variable). Async only: a
    plain-function job cannot use it.
    """

    def __init__(self, name: str, spec: LimitSpec, *, wait: float = 0.0,
                 lease: float = DEFAULT_LEASE, store: Callable[[], LimitStore]) -> None:
        self.name = check_name(name)
        self.spec = spec
        self.wait = check_seconds("wait", wait, allow_zero=True)
        self.lease = check_seconds("lease", lease)
        self._store = store
        self._held: ContextVar[tuple[_Held | None, ...]] = ContextVar(
            f"cogworker_limiter_{name}", default=())

    def __repr__(self) -> str:
        return f"Limiter({self.name!r}, {self.spec}, wait={self.wait:g})"

    def same_as(self, spec: LimitSpec, wait: float, lease: float) -> bool:
        """Whether registering it again with these settings asks for the same limiter."""
        return (self.spec, self.wait, self.lease) == (spec, float(wait), float(lease))

    async def __aenter__(self) -> Limiter:
        runner = RUNNER.get(None)
        if runner is not None and runner.unreleased:
            with contextlib.suppress(Exception):  # still away: the acquisition says so
                await runner.release_late()
        store = runner.store if runner is not None else self._store()
        member = None
        if self.spec.kind == "concurrent":
            context = CURRENT.get(None)
            member = limits.holder_member(
                runner.identity if runner is not None else None,
                context.jid if context is not None else "-", secrets.token_hex(8),
                self.lease)
        deadline = time.monotonic() + self.wait
        tries = 0
        while True:
            decision = await self._try(store, member, runner)
            if decision.admitted:
                self._held.set((*self._held.get(),
                                None if member is None else (store, member, runner)))
                return self
            pause = next_pause(tries, decision.retry_after, deadline - time.monotonic())
            if pause is None:
                await self._count_refusal(store, decision.now)
                raise OverLimit(self.name, decision.retry_after)
            await anyio.sleep(pause)
            tries += 1

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        held = self._held.get()
        if not held:
            return
        self._held.set(held[:-1])
        if held[-1] is not None:
            store, member, runner = held[-1]
            await self._release(store, member, runner)

    async def _try(self, store: LimitStore, member: str | None,
                   runner: Runner | None) -> Decision:
        spec = self.spec
        if runner is not None:  # in a worker: batched with its other jobs' calls
            try:
                return await runner.calls.take(self.name, spec, member)
            except BaseException:
                if member is not None:  # as below: it may have been taken
                    await self._release(store, member, runner)
                raise
        if member is None:
            take = limits.take_window if spec.kind == "window" else limits.take_token
            return await take(store, self.name, spec.capacity, spec.seconds or 0.0)
        try:
            return await limits.take_slot(store, self.name, spec.capacity, member)
        except BaseException:
            # Cancelled or cut off while the script ran: it may have taken the slot.
            # Give it back (idempotent), so that no slot is held by nobody.
            await self._release(store, member, RUNNER.get(None))
            raise

    async def _release(self, store: LimitStore, member: str, runner: Runner | None) -> None:
        """Give the slot back, even when the job is being cancelled. In a worker the
        release goes with its other jobs' (``limits/calls.py``), is sent whatever happens
        to this task, and one that meets Redis away is released again later
        (``Runner``). Outside a worker: shielded and bounded; a slot Redis does not take
        back ends with its lease."""
        if runner is not None:
            await runner.calls.release(self.name, member)
            return
        with anyio.CancelScope(shield=True):
            for attempt in range(1, RELEASE_ATTEMPTS + 1):
                try:
                    await limits.release_slot(store, self.name, member)
                    return
                except Exception as exc:
                    if attempt == RELEASE_ATTEMPTS:
                        log.warning("couldn't release a slot of limiter %r (%s): it is "
                                    "freed when its lease ends", self.name, why(exc))
                        return
                    await anyio.sleep(RELEASE_PAUSE * attempt)

    async def _count_refusal(self, store: LimitStore, now: float) -> None:
        """Count the refusal for the dashboard (best effort: never instead of OverLimit)."""
        try:
            await limits.count_over(store, self.name, now)
        except Exception as exc:
            log.debug("couldn't count a refusal of limiter %r: %s", self.name, why(exc))
