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

from cogworker_async import job, retries
from cogworker_async.job import Payload
from cogworker_async.status import SUCCEEDED, Ended

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
class RetryPolicy:
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
    policy: RetryPolicy,
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
    if job.has(payload, "failed_at"):
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


def unparseable(raw: bytes, *, queue: str, reason: str, now: float) -> Filing:
    """A raw job that could not be read goes to dead, its bytes kept in the entry."""
    return Filing("dead", job.unparseable_entry(raw, queue=queue, reason=reason, now=now), 0.0,
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
        payload = job.decode(raw, job.NO_SIZE_LIMIT)
    except Exception as exc:
        return unparseable(raw, queue="", reason=f"{exc} (while recording {error!r})", now=now)
    error_class, message, backtrace = describe(error)
    count = (job.count(payload, "interrupted_count") or 0) + 1
    attempt = retries.next_count(payload)
    entry = payload.copy()
    entry.update({"interrupted_count": count, "retry_count": attempt, "error_class": error_class,
                  "error_message": message, "error_backtrace": backtrace, "failed_at": now})
    if retries.exhausted(payload, attempt) or count > MAX_INTERRUPTS:
        return Filing("dead", entry, 0.0, terminal=True)
    return Filing("retry", entry, INTERRUPT_DELAY * count, terminal=False)
