"""The exception tree.

    CogworkerError
    ├── ConfigurationError          bad settings, missing extra, unusable server
    │   └── EmbeddedServerError     the embedded server could not start
    ├── WrongTypeKey                one of our keys holds another type (a co-tenant's)
    ├── LifespanFailed              ``@jobs.lifespan`` raised as it was entered (no job taken)
    ├── LifespanExitFailed          ``@jobs.lifespan`` raised as it was exited (jobs settled)
    ├── SerializationError (+TypeError)   arguments not JSON, raised at enqueue
    ├── PayloadTooLarge (+ValueError)     encoded job over max_payload_bytes, at enqueue
    ├── UnknownJob                  a payload names no registered job (filed in dead)
    ├── InvalidArguments            a payload's args don't fit the function (filed in dead)
    ├── UnparseablePayload          a payload that is not a JSON job (filed in dead)
    ├── ProcessDied                 recorded on jobs whose process died too often running them
    ├── JobTimeout                  a job ran past its ``timeout`` (retried like any failure)
    ├── OverLimit                   a limiter refused (the job is rescheduled, not failed)
    └── Retry                       raised by a job to ask for a retry after ``in_`` seconds

Redis' own errors stay inside ``cogworker_async.redis`` or surface as ``redis`` exceptions
from ``enqueue`` (the caller decides whether to try again: an enqueue is never retried
blindly, since a lost reply would push the job twice). One of them is ours:
``NotDurable``, a ``redis.exceptions.ConnectionError`` raised when ``durability`` is on
and the write was not confirmed in time (the job may exist: like a lost reply).
Another is ``RedisUnreachable`` (``redis/unreachable.py``): a ``CogworkerError`` and a
``ConnectionError`` (redis-py's and the OS's) raised by an enqueue that could not connect
(nothing enqueued), naming the URL, where it came from, and what to do.
"""

from __future__ import annotations

import numbers
from datetime import timedelta
from decimal import Decimal
from typing import Any


class CogworkerError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigurationError(CogworkerError):
    """Settings that cannot work, a missing optional extra, or an unsuitable server."""


class EmbeddedServerError(ConfigurationError):
    """The embedded Redis-compatible server could not be started or reached."""


def install_extra(extra: str) -> str:
    """How to get a missing extra, for a message: the package is on no index, so pip
    cannot install it by its name; from a clone's folder it can (issue 45)."""
    return (f"install the package with its {extra} extra: pip install '.[{extra}]' in your "
            "clone's folder (docs: Install)")


class LifespanFailed(CogworkerError):
    """The worker's lifespan (``@jobs.lifespan``) raised as it was entered: the worker
    stopped before it registered or took a job. The lifespan's error is the cause."""


class WrongTypeKey(CogworkerError):
    """A key where this package keeps one of its own holds another type (a co-tenant's
    key, or one damaged by hand): the call wrote nothing. ``key`` names it (delete it,
    or move the co-tenant to another namespace or database)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class LifespanExitFailed(CogworkerError):
    """The worker's lifespan raised as it was exited: after the worker had stopped and
    settled its jobs (nothing was lost). The lifespan's error is the cause."""


LIFESPAN_ERRORS = (LifespanFailed, LifespanExitFailed)
"""What a worker's lifespan raises as itself (out of the worker's task group)."""


class SerializationError(CogworkerError, TypeError):
    """Raised at enqueue when the arguments cannot be encoded as JSON."""


class PayloadTooLarge(CogworkerError, ValueError):
    """Raised at enqueue when the encoded job is over ``max_payload_bytes``."""


class UnknownJob(CogworkerError):
    """A payload names a job that is not registered in this App (filed in dead)."""


class InvalidArguments(CogworkerError):
    """A payload's arguments do not fit the job function's signature (filed in dead)."""


class ParentResultMissing(CogworkerError):
    """A job that takes its parent's result (``pass_result``) does not hold it: filed dead
    without it, then retried by hand, it is filed dead again, never run with None."""


class UnparseablePayload(CogworkerError):
    """A payload is not a JSON object describing a job (filed in dead, raw bytes kept)."""


class ProcessDied(CogworkerError):
    """A job's process died while running it more than ``max_orphanings`` times."""


class JobTimeout(CogworkerError):
    """A job ran longer than its ``timeout``: an async job is cancelled; a plain function
    cannot be (its thread runs on, and its slot stays busy until it returns)."""


class Expired(CogworkerError):
    """A job not started by its deadline (``options(expires_in=...)`` or
    ``expires_at=``): it is not run. Filed in dead with this reason, unless it was
    enqueued with ``dead_on_expiry=False`` (then dropped; its status says cancelled)."""


class OverLimit(CogworkerError):
    """A limiter (``App.limiter``) refused: its limit was reached and no slot or token
    came within its ``wait``. Escaping a job, the worker reschedules the job with a
    jittered backoff, counting neither a failure nor a retry, up to
    ``max_limit_reschedules`` times (then it fails like any error). Outside a worker it
    reaches the caller. ``retry_after``: seconds until the limiter may admit again, when
    it can tell (a window's end, a bucket's next token); None for a concurrent one."""

    def __init__(self, limiter: str, retry_after: float | None = None) -> None:
        later = "" if retry_after is None else f" (may admit again in {retry_after:.3f}s)"
        super().__init__(f"limiter {limiter!r} is over its limit{later}")
        self.limiter = limiter
        self.retry_after = retry_after


class Retry(CogworkerError):
    """Raise from a job to have it retried after ``in_`` seconds (it counts as a retry:
    with no retries left, the job goes to dead)."""

    def __init__(self, in_: float | timedelta = 0.0, reason: str = "") -> None:
        # As jobs/times.py's seconds_of (this bottom module imports nothing above it): a
        # timedelta is seconds too, any real number (Decimal, Fraction, numpy's) is read
        # with float(); a bool is not one. A negative delay is "now" (the worker's).
        if isinstance(in_, timedelta):
            in_ = in_.total_seconds()
        elif isinstance(in_, bool) or not isinstance(in_, numbers.Real | Decimal):
            raise TypeError(f"Retry(in_=) takes seconds or a timedelta, not "
                            f"{type(in_).__name__}")
        self.delay = float(in_)
        super().__init__(reason or f"retry requested in {self.delay:g}s")


def why(exc: BaseException) -> str:
    """An error for a log line: its class and message. (redis-py's errors' repr() shows
    only the class, hiding e.g. the WRONGTYPE text a script raised.)"""
    return f"{type(exc).__name__}: {exc}"


UNTRACKED = ("this App keeps no status records of its jobs (track_jobs=False, or "
             'fetch="basic"): status, result, cancel, keep_result and options(jid=...) '
             "need them")


class JobFailed(CogworkerError):
    """``result(jid)``: the job is dead (it failed with no retries left, or could not
    run); ``error`` is its last failure, ``status`` what its record says."""

    def __init__(self, message: str, status: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.error: str | None = getattr(status, "error", None)


class JobCancelled(CogworkerError):
    """``result(jid)``: the job was cancelled. Also what a plain job function raises to
    stop itself once ``current_job().cancel_requested`` is True."""

    def __init__(self, message: str = "the job was cancelled", status: Any = None) -> None:
        super().__init__(message)
        self.status = status


class ResultNotJSON(CogworkerError):
    """A job that keeps its result returned something JSON cannot hold: the run is
    filed in dead with this error (it is not run again: it did its work)."""
