"""What happens to a job once it has run (or could not run): a pure decision.

The processor asks this module, then settles what it says. Nothing here does I/O, so
every branch is unit-tested without Redis. The decision is fixed the moment a job
returns; a failure later in the bookkeeping can never turn a job that ran into a
give-back (and so into a second run).
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from cogworker_async.errors import Expired, OverLimit
from cogworker_async.jobs import retries, wire
from cogworker_async.jobs.status import SUCCEEDED, Ended
from cogworker_async.jobs.wire import Payload

MAX_ERROR_MESSAGE: Final = 10_000
"""Characters of an error message kept on a failed job."""

MAX_BACKTRACE_LINES: Final = 30


@dataclass(frozen=True, slots=True)
class Ack:
    """It ran (or was filed in dead unparsed): forget it."""

    ended: Ended = SUCCEEDED
    """How it ended, for its status record: succeeded (with its result, if it keeps
    one) or cancelled."""


@dataclass(frozen=True, slots=True)
class Filing:
    """To file: ``entry`` in ``target`` (retry or dead), due ``delay`` seconds from now."""

    target: Literal["retry", "dead"]
    entry: Payload
    delay: float
    terminal: bool
    """True when the job will not run again (dead): unique locks etc. are released."""


@dataclass(frozen=True, slots=True)
class GiveBack:
    """It never started (the process is stopping): back to the front of its queue."""


Disposition = Ack | Filing | GiveBack

ACK: Final = Ack()
"""The ack of a run that succeeded and keeps no result (made once: it is every job's)."""


@dataclass(frozen=True, slots=True)
class RetryDelays:
    """The settings' backoff bounds a failed run's retry delay is drawn within (a job's
    own policy, ``RetryPolicy``, is what it registered: ``jobs/retries.py``)."""

    base_delay: float
    max_delay: float


def describe(error: BaseException) -> tuple[str, str, list[str]]:
    """Class name, message and a short backtrace of ``error``, for a failed job."""
    message = str(error)[:MAX_ERROR_MESSAGE]
    lines = traceback.format_exception(error)
    return type(error).__name__, message, lines[-MAX_BACKTRACE_LINES:]


def after_failure(
    payload: Payload,
    error: BaseException,
    *,
    now: float,
    policy: RetryDelays,
    terminal: bool = False,
    delay: Callable[[], float | None] | None = None,
    rng: random.Random | None = None,
) -> Filing:
    """Retry with backoff (or after what ``delay()`` says, if the job asks for a delay)
    while retries are left; else, or if ``terminal``, dead.

    ``retry_count`` follows Sidekiq: 0 after the first failure, so ``retry=N`` allows N
    runs after the first.
    """
    error_class, message, backtrace = describe(error)
    count = retries.next_count(payload)
    entry = payload.copy()
    entry.update({
        "retry_count": count,
        "error_class": error_class,
        "error_message": message,
        "error_backtrace": backtrace,
    })
    if wire.has(payload, "failed_at"):
        entry["retried_at"] = now
    else:
        entry["failed_at"] = now
    if terminal or retries.exhausted(payload, count):
        return Filing("dead", entry, 0.0, terminal=True)
    wanted = delay() if delay is not None else None  # asked only when it will retry
    asked = retries.asked_delay(wanted) if wanted is not None else None
    wait = asked if asked is not None else \
        retries.delay(count, base=policy.base_delay, cap=policy.max_delay, rng=rng)
    return Filing("retry", entry, wait, terminal=False)


LIMIT_BACKOFF: Final = 1.0
"""Seconds the first reschedule of a limited job waits; each next one twice as long
(1, 2, 4, ... then jittered), at least until its limiter said it may admit again."""
MAX_LIMIT_BACKOFF: Final = 3600.0
"""Longest wait of one reschedule: the default 20 reschedules span about 9 hours, so a
backlog of hours behind a limiter is waited out rather than failed (Sidekiq Enterprise
waits 5 minutes more at each of its 20)."""
LIMIT_JITTER: Final = 0.5
"""Each reschedule waits up to this fraction longer, so that the jobs one limiter
refused together don't all come back at once."""


def after_over_limit(payload: Payload, error: OverLimit, *, now: float,
                     max_reschedules: int, rng: random.Random | None = None) -> Filing | None:
    """A run refused by a limiter (``OverLimit`` escaped it): back in the retry set after
    a jittered backoff, counting neither a failure nor a retry (``retry_count`` is
    kept, ``limited_count`` counts the reschedules). None once it was rescheduled
    ``max_reschedules`` times: then it fails like any other error (with its retries).

    Filed where a retry waits, its status ``retrying`` with the OverLimit error: the
    same path as a retry (the poller, the unique lock kept over the delay, the hand-over
    at shutdown), so nothing new can lose it."""
    count = limited_count(payload) + 1
    if count > max_reschedules:
        return None
    wait = max(error.retry_after or 0.0,
               min(MAX_LIMIT_BACKOFF, LIMIT_BACKOFF * 2.0 ** min(count - 1, 32)))
    wait *= 1 + (rng or random).uniform(0, LIMIT_JITTER)
    entry = payload.copy()
    entry.update({"error_class": type(error).__name__,
                  "error_message": str(error)[:MAX_ERROR_MESSAGE]})
    entry["limited_count"], entry["limited_at"] = count, now
    return Filing("retry", entry, wait, terminal=False)


def limited_count(payload: Payload) -> int:
    """How often a limiter's refusal rescheduled the job (``limited_count``, written by
    ``after_over_limit`` with ``limited_at``; 0 when absent or not a count)."""
    return max(0, wire.count(payload, "limited_count") or 0)


def deadline_of(payload: Payload) -> float | None:
    """When the job must have started by (epoch s), if it has a deadline."""
    return wire.number(payload, "expires_at")


def expired(payload: Payload, *, now: float, policy: RetryDelays) -> Disposition | None:
    """A job past its deadline is not run: dead as ``Expired``, or dropped (its record
    says cancelled) if enqueued with ``dead_on_expiry=False``. None: it may run (no
    deadline, or not past it). Judged by the worker's clock against the enqueuer's
    (``expires_in`` was added to the enqueuer's clock): keep hosts in NTP sync."""
    deadline = deadline_of(payload)
    if deadline is None or now <= deadline:
        return None
    if payload.get("dead_on_expiry") is False:
        return Ack(Ended("cancelled", keep=wire.number(payload, "keep_result")))
    late = now - deadline
    return after_failure(payload, Expired(f"not started by its deadline: {late:.3f}s late"),
                         now=now, policy=policy, terminal=True)


def unparseable(raw: bytes, *, queue: str, reason: str, now: float) -> Filing:
    """A raw job that could not be read goes to dead, its bytes kept in the entry."""
    return Filing("dead", wire.unparseable_entry(raw, queue=queue, reason=reason, now=now), 0.0,
                  terminal=True)


MAX_INTERRUPTS: Final = 3
"""Times a job may be re-filed after recording its failure failed, before it goes to dead."""
INTERRUPT_DELAY: Final = 10.0
"""Seconds per interruption before such a job is retried (10, 20, 30)."""


def interrupt(raw: bytes, error: BaseException, *, now: float) -> Filing:
    """Recording a failure itself failed (a bug in the bookkeeping): re-file the job from
    its payload *as fetched*, not from whatever the failed attempt had built.

    ``retry_count`` is this attempt's number from the fetched payload; a job with no
    retries left goes straight to dead, like any terminal failure, and so does one
    interrupted more than MAX_INTERRUPTS times. Unreadable bytes go to dead as they are.
    """
    try:
        payload = wire.decode(raw, wire.NO_SIZE_LIMIT)
    except Exception as exc:
        return unparseable(raw, queue="", reason=f"{exc} (while recording {error!r})", now=now)
    error_class, message, backtrace = describe(error)
    count = (wire.count(payload, "interrupted_count") or 0) + 1
    attempt = retries.next_count(payload)
    entry = payload.copy()
    entry.update({"interrupted_count": count, "retry_count": attempt, "error_class": error_class,
                  "error_message": message, "error_backtrace": backtrace, "failed_at": now})
    if retries.exhausted(payload, attempt) or count > MAX_INTERRUPTS:
        return Filing("dead", entry, 0.0, terminal=True)
    return Filing("retry", entry, INTERRUPT_DELAY * count, terminal=False)
