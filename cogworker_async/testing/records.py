"""What a test sees of faked jobs: the jobs waiting (``Enqueued``), the runs a drain made
(``Run``), the error a runaway drain stops with (``TooManyRuns``), and the one for what
the fake does not claim (``NotFaked``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cogworker_async.worker.observers import Outcome

Waiting = Literal["queued", "scheduled", "retrying", "waiting"]
"""Where a faked job waits: on its queue, scheduled for later, for its retry, or for its
parents (``options(after=[...])``)."""


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A job the fake holds, as it was pushed (after the client middleware)."""

    jid: str
    name: str
    """The registered job name (the payload's ``class``)."""
    args: list[Any]
    """As enqueued: a job ``waiting`` to take its parent's result (``pass_result``) has
    ``enqueue/after.py``'s ``RESULT_SLOT`` first until the parent ends."""
    kwargs: dict[str, Any]
    queue: str
    state: Waiting
    due_at: float | None
    """When it may run (epoch s): None for a job enqueued to run now (or once its
    parents have); for a retry, when a worker would retry it (``drain`` does not wait
    for it)."""
    payload: dict[str, Any] = field(repr=False)
    """The whole payload, with what client middleware added."""


@dataclass(frozen=True, slots=True)
class Run:
    """One run made by ``drain`` (or ``inline``), and what it came to."""

    jid: str
    name: str
    queue: str
    attempt: int
    """1 for the first run, 2 for the first retry, ..."""
    outcome: Outcome
    """As a worker reports it: ``succeeded``, ``retried``, ``dead``, ``discarded``,
    ``cancelled``, ``expired`` or ``limited``."""
    error: BaseException | None = None
    """What the run raised (None for a success, and for a limiter's refusal)."""
    delay: float | None = None
    """Seconds a worker would wait before the next attempt (``retried``, ``limited``)."""
    result: Any = None
    """The return value, for a job that keeps its result (``keep_result``)."""
    entry: dict[str, Any] | None = field(default=None, repr=False)
    """The retry or dead entry as a worker would file it (error fields, retry_count)."""


class TooManyRuns(RuntimeError):
    """``drain`` ran its ``max_runs`` and jobs still wait (a job that enqueues itself
    forever?), or ``inline`` runs nested deeper than its bound."""


class NotFaked(RuntimeError):
    """Asked of a ``fake()``/``inline()`` block for something the fake does not claim
    (docs/guides/testing.md lists what it claims): what only Redis does (``pause``, a
    limiter entered outside a job, the admin reads), or an order that priority aging
    would change. Raised rather than answered differently from Redis."""
