"""Job definitions: what ``@jobs.job`` records about a function (its name, its options,
its signature), with no I/O and no client.

Below both the client (which checks and builds a payload from a definition) and the
registry (whose enqueue methods call the client), so neither imports the other's half.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cogworker_async.errors import ConfigurationError
from cogworker_async.jobs import dedup
from cogworker_async.jobs import unique as unique_module
from cogworker_async.jobs.after import (  # re-exported: their home was here
    MAX_PARENTS as MAX_PARENTS,
)
from cogworker_async.jobs.after import (
    PARENT_FAILURE_POLICIES as PARENT_FAILURE_POLICIES,
)
from cogworker_async.jobs.after import check_after
from cogworker_async.jobs.groups import GroupKey, check_group, group_for
from cogworker_async.jobs.names import check_queue_name
from cogworker_async.jobs.priority import DEFAULT_PRIORITY, check_priority
from cogworker_async.jobs.retries import RetryIn as RetryIn  # re-exported: its home was here
from cogworker_async.jobs.retries import check_discard_on as check_discard_on
from cogworker_async.jobs.retries import check_retry
from cogworker_async.jobs.status import check_jid, check_keep_result
from cogworker_async.jobs.times import Delay as Delay  # re-exported: their home was here
from cogworker_async.jobs.times import When as When
from cogworker_async.jobs.times import plain
from cogworker_async.jobs.unique import UniqueKey, UniquePolicy


@dataclass(frozen=True, slots=True)
class JobOptions:
    """A job's options, flat: what ``@jobs.job(...)`` declares and ``.options(...)``
    overrides per enqueue. Both take the same keywords (``keywords.JobKeywords``), whose
    values (``Unique``, ``Throttle``, ``After``, ``RetryPolicy``, ``Group``...) are
    normalised into these fields by ``keywords.resolve``: the payload builder reads them,
    so the wire format is the same whatever the spelling."""

    queue: str = "default"
    retry: bool | int = True
    timeout: float | None = None
    """Seconds a run may take before it fails with JobTimeout (None: no limit)."""
    unique: UniquePolicy | None = None
    unique_ttl: float = unique_module.DEFAULT_TTL
    unique_key: str | UniqueKey | None = None
    """What a unique job's digest covers beside its name and queue (``Unique(key=)``):
    a fixed str or ``fn(*args, **kwargs)``; None: the arguments."""
    keep_result: float | None = None
    """Seconds the job's return value (JSON) is kept after it succeeds (None: not kept;
    ``jobs.result(jid)`` then returns None)."""
    jid: str | None = None
    """A caller-chosen jid (``options(jid=...)``, one enqueue): enqueueing it while a job
    with that jid is queued, scheduled, running or retrying returns None."""
    expires_in: float | None = None
    """Seconds after its enqueue (a scheduled job: after its due time) by which the job
    must have started (each of its attempts: a retry due later does not run either);
    None: no deadline."""
    expires_at: float | None = None
    """The same deadline as a point in time (epoch s); at most one of the two."""
    dead_on_expiry: bool = True
    """An expired job goes to dead (reason ``Expired``); False: it is dropped."""
    after: tuple[str, ...] = ()
    """Jids of the jobs this one runs after (``options(after=[...])``): it waits, state
    ``waiting``, until every one succeeded (``enqueue/after.py``)."""
    on_parent_failure: str = "cancel"
    """What a waiting job does when a parent dies or is cancelled: ``cancel`` (it and its
    own dependents are cancelled), ``run`` (it runs anyway), ``dead`` (filed in dead,
    naming the parent)."""
    pass_result: bool = False
    """With one parent: its return value becomes this job's first argument (chains)."""
    priority: int = DEFAULT_PRIORITY
    """From -10 to 10, higher runs sooner within its queue; first in, first out within
    one priority (``priority.py``)."""
    group: str | None = None
    """The fair group the job waits in (``group="tenant-42"``): a queue's groups are
    served in turn (``groups.py``); None: no group, or the one ``group_key`` names."""
    group_key: GroupKey | None = None
    """``group=fn``: ``fn(*args, **kwargs)`` names each enqueue's group (``group`` wins
    over it)."""
    throttle: float | None = None
    """Seconds after an enqueue of the job's key during which others return None
    (``dedup.py``)."""
    debounce: float | None = None
    """Seconds the job waits; an enqueue of its key meanwhile moves it, with the new
    arguments (``dedup.py``)."""
    coalesce: bool = False
    """Enqueues of the job's key merge into the one waiting, or keep one follow-up of the
    one running (``dedup.py``)."""
    key: str | dedup.DedupKey | None = None
    """What the dedup mode dedups by: a str, or ``fn(*args, **kwargs)`` naming it per
    enqueue (None: the job's arguments)."""

    def __post_init__(self) -> None:
        self._in_seconds()
        check_queue_name(self.queue)
        check_retry(self.retry)
        if self.timeout is not None:
            _seconds("timeout", self.timeout, MAX_TIMEOUT)
        unique_module.policy_of(self.unique)
        _seconds("unique_ttl", self.unique_ttl, unique_module.MAX_TTL)
        unique_module.check_key(self.unique_key)
        check_keep_result(self.keep_result)
        if self.jid is not None:
            check_jid(self.jid)
        _check_expiry(self.expires_in, self.expires_at, self.dead_on_expiry)
        check_after(self.after, self.on_parent_failure, self.pass_result)
        check_priority(self.priority)
        if self.group is not None:
            check_group(self.group)
        if self.group_key is not None and not callable(self.group_key):
            raise TypeError(f"group_key must be a function, not {self.group_key!r}")
        dedup.check(self.throttle, self.debounce, self.coalesce, self.key)
        mode = dedup.mode_of(self)
        if mode is not None and (self.unique or self.after or self.jid is not None):
            raise ValueError(f"{mode[0]} decides which enqueues run: it does not combine "
                             "with unique, after= or a chosen jid")

    def _in_seconds(self) -> None:
        """Each duration given as a timedelta (arq's spelling, and the standard
        library's) or another real number (a Decimal...), as float seconds;
        ``keep_result=0`` as None: arq's "keep no result"."""
        for name in DURATIONS:
            object.__setattr__(self, name, plain(getattr(self, name), name))
        if self.keep_result == 0 and not isinstance(self.keep_result, bool):
            object.__setattr__(self, "keep_result", None)

    def deadline(self, now: float) -> float | None:
        """When a job that may start from ``now`` on must have started by (epoch s), if
        ever."""
        if self.expires_at is not None:
            return float(self.expires_at)
        return None if self.expires_in is None else now + self.expires_in


def enqueue_group(definition: JobDefinition, options: JobOptions, args: Sequence[Any],
                  kwargs: Mapping[str, Any], fetch: str) -> str | None:
    """The fair group of one enqueue: a fixed name, else the function of its arguments
    (``group=fn``) naming it, else none. A ``ConfigurationError`` under basic fetch,
    whose BRPOP never takes a job from a group's list."""
    group = options.group
    key = options.group_key if options.group_key is not None else definition.group_key
    if group is None and key is not None:
        group = group_for(key, list(args), dict(kwargs), definition.name)
    if group is not None and fetch == "basic":
        raise ConfigurationError("groups need reliable fetch: a basic (BRPOP) worker never "
                                 "takes a job from a group's list")
    return group


def _check_expiry(expires_in: object, expires_at: object, dead_on_expiry: object) -> None:
    """A job's deadline: ``expires_in`` or ``expires_at`` (epoch s), at most one."""
    if expires_in is not None:
        _seconds("expires_in", expires_in, MAX_EXPIRES_IN)
    if expires_at is not None:
        if isinstance(expires_at, bool) or not isinstance(expires_at, int | float) \
                or not math.isfinite(expires_at):
            raise TypeError("expires_at must be an aware datetime or epoch seconds, "
                            f"not {expires_at!r}")
        if expires_in is not None:
            raise ValueError("give expires_in or expires_at, not both")
    if not isinstance(dead_on_expiry, bool):
        raise TypeError(f"dead_on_expiry must be True or False, not {dead_on_expiry!r}")


DURATIONS: Final = ("timeout", "unique_ttl", "keep_result", "expires_in", "throttle",
                     "debounce")
"""The ``JobOptions`` fields that are seconds: each may be given as a ``timedelta``."""
MAX_EXPIRES_IN: Final = 366 * 24 * 3600.0
"""Longest ``expires_in`` (a year)."""
MAX_TIMEOUT: Final = 366 * 24 * 3600.0
"""Longest job ``timeout`` (a year): anything longer is a typo, or no timeout (None)."""


def _seconds(name: str, value: object, cap: float) -> None:
    """A duration a job is declared with: a finite number of seconds in (0, cap]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be seconds or a timedelta, not {type(value).__name__}")
    if not 0 < value <= cap:  # False for NaN too
        raise ValueError(f"{name} must be a number of seconds > 0 and <= {cap:,.0f}, "
                         f"got {value!r}")


@dataclass(frozen=True, slots=True)
class JobDefinition:
    """A registered job: its name, function and defaults."""

    name: str
    func: Callable[..., Any]
    options: JobOptions
    unique_key: UniqueKey | None = None
    """Read when ``options.unique_key`` is None (``@jobs.job`` sets that one)."""
    retry_in: RetryIn | None = None
    """``RetryPolicy(delay=)``: read by the worker from the registration, never a
    payload (``retries.RetryPolicy``)."""
    discard_on: tuple[type[BaseException], ...] = ()
    """Exceptions that send the job to dead at once, whatever its retries."""
    group_key: GroupKey | None = None
    """Read when ``options.group_key`` is None (``@jobs.job`` sets that one)."""

    @property
    def is_async(self) -> bool:
        return _is_async(self.func)

    @property
    def signature(self) -> inspect.Signature | None:
        return _signature(self.func)

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise TypeError if ``args``/``kwargs`` don't fit the function."""
        # Whether arguments bind depends only on how many are positional and which
        # names are given: a shape that bound once binds again (checked on every
        # enqueue and every run, so remembered).
        shape = (self.func, len(args), frozenset(kwargs))
        if shape in _FITTING_SHAPES:
            return
        signature = self.signature
        if signature is None:
            return
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from None
        if len(_FITTING_SHAPES) < MAX_REMEMBERED_SHAPES:
            _FITTING_SHAPES.add(shape)


MAX_REMEMBERED_SHAPES: Final = 10_000
_FITTING_SHAPES: set[tuple[Callable[..., Any], int, frozenset[str]]] = set()


# Looked up on every enqueue and every run: computed once per function.
@functools.cache
def _signature(func: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):  # some builtins have none
        return None


@functools.cache
def _is_async(func: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(func)
