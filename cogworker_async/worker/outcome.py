"""What happens to a job once it has run (or could not run): a pure decision.

The processor asks this module, then settles what it says. Nothing here does I/O, so
every branch is unit-tested without Redis. The decision is fixed the moment a job
returns; a failure later in the bookkeeping can never turn a job that ran into a
give-back (and so into a second run).
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass
from typing import Final, Literal

from cogworker_async import backoff, job
from cogworker_async.job import Payload

MAX_ERROR_MESSAGE: Final = 10_000
"""Characters of an error message kept on a failed job."""

MAX_BACKTRACE_LINES: Final = 30


@dataclass(frozen=True, slots=True)
class Ack:
    """It ran (or was filed in dead unparsed): forget it."""


@dataclass(frozen=True, slots=True)
class File:
    """File ``entry`` in ``target`` (retry or dead), due ``delay`` seconds from now."""

    target: Literal["retry", "dead"]
    entry: Payload
    delay: float
    terminal: bool
    """True when the job will not run again (dead): unique locks etc. are released."""


@dataclass(frozen=True, slots=True)
class GiveBack:
    """It never started (the process is stopping): back to the front of its queue."""


Disposition = Ack | File | GiveBack


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
    rng: random.Random | None = None,
) -> File:
    """Retry with backoff while retries are left; else, or if ``terminal``, dead.

    ``retry_count`` follows Sidekiq: 0 after the first failure, so ``retry=N`` allows N
    runs after the first.
    """
    error_class, message, backtrace = describe(error)
    previous = payload.get("retry_count")
    count = previous + 1 if isinstance(previous, int) and not isinstance(previous, bool) else 0
    entry = dict(payload)
    entry.update(
        retry_count=count,
        error_class=error_class,
        error_message=message,
        error_backtrace=backtrace,
    )
    entry["retried_at" if "failed_at" in payload else "failed_at"] = now
    if terminal or count >= backoff.max_retries(payload.get("retry")):
        return File("dead", entry, 0.0, terminal=True)
    wait = backoff.delay(count, base=policy.base_delay, cap=policy.max_delay, rng=rng)
    return File("retry", entry, wait, terminal=False)


def unparseable(raw: bytes, *, queue: str, reason: str, now: float) -> File:
    """A raw job that could not be read goes to dead, its bytes kept in the entry."""
    return File("dead", job.unparseable_entry(raw, queue=queue, reason=reason, now=now), 0.0,
                terminal=True)
