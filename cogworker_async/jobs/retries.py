"""Retries, pure: how many a job has, how its attempts are counted, how long it waits.

The payload fields this module owns (Sidekiq's, so tools that know Sidekiq read them):

- ``retry``: True (``DEFAULT_RETRIES``), False (none) or an int: the retries a job has
  after its first run;
- ``retry_count``: absent before the first failure, 0 after it, 1 after the second...
  so ``retry=N`` allows N runs after the first;
- the attempt a run is (``current_job().attempt``): 1 for the first run, then
  ``retry_count + 2``.

A ``retry_count`` that is not an int (bad data) counts as "no failure yet" everywhere:
one formula, used by the worker's filing, its interrupt path, the job's context and
the admin's manual retry. Nothing here does I/O.

``RetryPolicy`` (below) is the ``retry=`` option as one value: the retries, the delay
before each and the exceptions that are never retried.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from cogworker_async.jobs.times import plain, seconds_of

if TYPE_CHECKING:  # job imports settings, which imports this module
    from cogworker_async.jobs.wire import Payload

DEFAULT_RETRIES: Final = 25
"""What ``retry=True`` means: this many retries after the first failure (Sidekiq's)."""

JITTER: Final = 0.25
"""Each delay is drawn within +/- this fraction, so failed batches don't retry in lockstep."""

MAX_ASKED_DELAY: Final = 366 * 24 * 3600.0
"""Longest delay a job may ask for (``Retry(in_=...)``, ``retry_in``): a year. An infinite
one would give the retry entry a score no poller ever reaches: the job would be lost."""


def check_retry(retry: object) -> bool | int:
    """``retry`` as given to ``@jobs.job``/``options``: True, False or an int >= 0."""
    if isinstance(retry, bool):
        return retry
    if not isinstance(retry, int):
        raise TypeError(f"retry must be True, False or an int, not {type(retry).__name__}")
    if retry < 0:
        raise ValueError(f"retry must be >= 0, got {retry}")
    return retry


def max_retries(retry: object) -> int:
    """What a payload's ``retry`` field allows: True = 25, False = 0, an int = itself.

    A missing field means the default; anything unreadable means no retries (bad data
    is not retried blindly).
    """
    if retry is None or retry is True:
        return DEFAULT_RETRIES
    if retry is False:
        return 0
    if isinstance(retry, int) and retry >= 0:
        return retry
    return 0


def failures(payload: Mapping[str, Any]) -> int:
    """How many times the job failed before (its ``retry_count`` + 1; 0 if none)."""
    count = payload.get("retry_count")
    return count + 1 if isinstance(count, int) and not isinstance(count, bool) else 0


def next_count(payload: Mapping[str, Any]) -> int:
    """The ``retry_count`` a failure of this run records: 0 after the first failure."""
    return failures(payload)


def attempt_of(payload: Mapping[str, Any]) -> int:
    """Which run this is: 1 for the first, 2 after one failure, and so on."""
    return failures(payload) + 1


def exhausted(payload: Mapping[str, Any], count: int) -> bool:
    """True when a failure recorded as ``count`` leaves the job no retry (dead)."""
    return count >= max_retries(payload.get("retry"))


def delay(count: int, *, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds before retry number ``count`` (0-based): ``base * 2**count``, capped, jittered."""
    raw = min(cap, base * 2.0 ** min(count, 64))
    spread = (rng or random).uniform(-JITTER, JITTER)
    return max(0.0, min(cap, raw * (1.0 + spread)))


def asked_delay(wanted: float) -> float | None:
    """A delay the job asked for, within [0, MAX_ASKED_DELAY]; None (use the backoff)
    for NaN."""
    if math.isnan(wanted):
        return None
    return min(max(0.0, wanted), MAX_ASKED_DELAY)


def for_manual_retry(payload: Payload) -> None:
    """A retry asked for by a person does not use up an attempt (as in Sidekiq): the
    count goes back one, so that a failure of this run is filed as the last one was."""
    count = payload.get("retry_count")
    if isinstance(count, int) and not isinstance(count, bool):
        if count <= 0:
            payload.pop("retry_count")
        else:
            payload["retry_count"] = count - 1


RetryIn = Callable[[int, BaseException], float | timedelta | None]
"""``retry_in(attempt, error)``: seconds (or a timedelta) before the next attempt, or None
for the default."""


def check_discard_on(discard_on: object) -> tuple[type[BaseException], ...]:
    """``discard_on=``: exception classes (one, or a list), or a TypeError naming the one
    that is not."""
    kinds = tuple(discard_on) if isinstance(discard_on, list | tuple | set | frozenset) \
        else (discard_on,)
    for kind in kinds:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise TypeError(f"discard_on takes exception classes, not {kind!r}")
    return kinds


@dataclass(frozen=True, slots=True)
class FixedDelay:
    """``RetryPolicy(delay=S)``: the same S seconds before every retry."""

    seconds: float

    def __call__(self, attempt: int, error: BaseException) -> float:
        return self.seconds


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``retry=RetryPolicy(max=5, delay=..., discard_on=(...))``: how a failed job is
    retried (Temporal's ``RetryPolicy``). The flat spellings still work: ``retry=5`` (or
    True/False) is ``max``, ``retry_in=`` is ``delay``, ``discard_on=`` is itself.

    - ``max``: retries after the first run: an int >= 0, True (``DEFAULT_RETRIES``) or
      False (none), so ``max=1`` means at most 2 runs;
    - ``delay``: seconds before each retry, or ``fn(attempt, error) -> seconds | None``
      (None: the backoff); None: the exponential backoff (``delay()`` above);
    - ``discard_on``: exception classes that file the job in dead at once, whatever
      retries are left.

    A worker reads ``delay`` and ``discard_on`` from the job's registration (no payload
    field carries them, so a worker of a process that never saw a call's value could not
    honour it): ``.options(retry=RetryPolicy(...))`` may change ``max`` only.
    """

    max: bool | int = True
    delay: float | timedelta | RetryIn | None = None
    discard_on: Sequence[type[BaseException]] | type[BaseException] = ()

    def __post_init__(self) -> None:
        check_retry(self.max)
        object.__setattr__(self, "delay", plain(self.delay, "delay"))
        if self.delay is not None and not callable(self.delay):
            if isinstance(self.delay, bool) or not isinstance(self.delay, int | float):
                raise TypeError("delay must be seconds, a timedelta or fn(attempt, error) -> "
                                "seconds, "
                                f"not {type(self.delay).__name__}")
            if not 0 <= self.delay <= MAX_ASKED_DELAY:  # False for NaN too
                raise ValueError(f"delay must be seconds >= 0 and <= {MAX_ASKED_DELAY:,.0f}, "
                                 f"got {self.delay!r}")
        object.__setattr__(self, "discard_on", check_discard_on(self.discard_on))

    @property
    def retry_in(self) -> RetryIn | None:
        """``delay`` as the worker calls it: ``fn(attempt, error)``, or None."""
        if self.delay is None or callable(self.delay):
            return self.delay
        return FixedDelay(seconds_of(self.delay, "delay"))

    @property
    def discarded(self) -> tuple[type[BaseException], ...]:
        """``discard_on`` as a tuple of classes."""
        return check_discard_on(self.discard_on)
