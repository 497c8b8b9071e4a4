"""Dedup modes: at most so many runs of one key, each rule kept in the step that pushes.

A key is ``key="..."`` (scoped to the job's name and queue), a function of the job's
arguments naming it, or, by default, the job's name and arguments as ``unique`` digests
them. The modes, one per enqueue:

- ``options(throttle=S)``: the first enqueue of a key runs; any other within S seconds of
  it returns None, even after the first has finished (a window no run or cancel ends);
- ``options(debounce=S)``: the job waits S seconds; an enqueue of the key while it still
  waits replaces its arguments with the new ones and moves its run to S seconds from
  then, returning its jid: a burst runs once, S seconds after the last enqueue, with the
  last arguments;
- ``options(coalesce=True)``: while a job of the key waits on its queue, enqueues merge
  into it (it takes the latest arguments, keeps its place and jid); while one runs, they
  keep exactly one follow-up, with the latest arguments, which runs after it, whatever
  its end.

As values, on ``@jobs.job`` and ``.options()`` alike: ``dedup=Throttle(S, key=...)``,
``Debounce(S, key=...)``, ``Coalesce(key=...)``, or ``Unique(...)`` (``unique.py``): one
value of the family per job, and a value replaces the family the job had (an
``.options(dedup=Throttle(5))`` of a unique job is throttled, not unique). The flat
``throttle=``, ``debounce=``, ``coalesce=``, ``key=`` still work.

Each is one script on the queue's slot (``redis/dedup.py``), so 20 enqueuers of one key
at once keep the rule exactly. A coalesced follow-up is a dependent of the job it
follows (``after=``), released by the same crash-safe relay; it needs status records.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Protocol

from cogworker_async.errors import ConfigurationError
from cogworker_async.jobs import context, unique
from cogworker_async.jobs.times import plain, seconds_of

MAX_WINDOW: Final = 366 * 24 * 3600.0
"""Longest throttle window or debounce delay (a year)."""
MAX_KEY_LENGTH: Final = unique.MAX_KEY_LENGTH
"""Longest ``key=...``, in characters."""
DedupKey = Callable[..., str]
"""``fn(*args, **kwargs) -> str``: the key of one enqueue."""
MODES: Final = ("throttle", "debounce", "coalesce")
_AT_FRONT: Final = len(b'{"jid":"')
"""Where wire.build writes the jid: right after the payload's opening."""
COALESCED: Final = b'"coalesce":true'
"""In the payload of a coalesced job (``mark``): a basic-fetch worker, which pops without
a script, looks for it (worker/fetch.py) to take the job's merge in one more call."""


def check(throttle: object, debounce: object, coalesce: object, key: object) -> None:
    """The dedup options of one job, or a TypeError/ValueError naming the problem."""
    _seconds("throttle", throttle)
    _seconds("debounce", debounce)
    if not isinstance(coalesce, bool):
        raise TypeError(f"coalesce must be True or False, not {coalesce!r}")
    chosen = [name for name, on in (("throttle", throttle is not None),
                                    ("debounce", debounce is not None),
                                    ("coalesce", coalesce)) if on]
    if len(chosen) > 1:
        raise ValueError(f"one dedup mode per job: {' and '.join(chosen)} were both given")
    if key is not None:
        unique.check_key(key)
        if not chosen:
            raise ValueError("key names what throttle, debounce or coalesce dedup by: give "
                             "one of them with it")


def _seconds(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be seconds or a timedelta, not {type(value).__name__}")
    if not (math.isfinite(value) and 0 < value <= MAX_WINDOW):
        raise ValueError(f"{name} must be seconds > 0 and <= {MAX_WINDOW:,.0f}, "
                         f"got {value!r}")


class Options(Protocol):
    """What the modes read of a job's options (``definition.JobOptions``)."""

    @property
    def queue(self) -> str: ...
    @property
    def throttle(self) -> float | None: ...
    @property
    def debounce(self) -> float | None: ...
    @property
    def coalesce(self) -> bool: ...
    @property
    def key(self) -> str | DedupKey | None: ...


def mode_of(options: Options) -> tuple[str, float] | None:
    """(mode, seconds) of the options' dedup mode (coalesce: 0), or None."""
    if options.throttle is not None:
        return "throttle", float(options.throttle)
    if options.debounce is not None:
        return "debounce", float(options.debounce)
    if options.coalesce:
        return "coalesce", 0.0
    return None


def check_call(mode: str, *, scheduled: bool, tracked: bool) -> None:
    """What one enqueue of a dedup mode may not combine with."""
    if scheduled and mode != "throttle":
        raise ValueError(f"{mode} decides when the job runs: enqueue it with enqueue(), not "
                         "enqueue_in() or enqueue_at()")
    if context.BATCH.get() is not None:
        raise ValueError(f"{mode}: a job of a dedup mode cannot join a batch (its run may "
                         "be another enqueue's)")
    if mode == "coalesce" and not tracked:
        raise ConfigurationError("coalesce needs status records (track_jobs=True): a "
                                 "follow-up waits on the record of the job it follows")


def digest(name: str, options: Options, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The key of one enqueue: the job's name, queue and ``key`` (or its arguments)."""
    return unique.digest(name, options.queue, args, kwargs, options.key)


def placed(raw: bytes, jid: str) -> tuple[bytes, int]:
    """``raw`` and how many bytes precede its own jid (the payload's top-level ``jid``).

    A merge (debounce.lua, coalesce.lua) writes the jid of the job it merges into at that
    offset: found here, not assumed, because a client middleware may write fields before
    the jid, one of them even holding a ``jid`` of its own (a trace context). wire.build
    writes it first (no cost); otherwise the payload is encoded again with a unique
    marker for its jid, keeping every field where it was, and the marker found."""
    if json.dumps(jid) != f'"{jid}"':  # spliced as text into another payload's JSON
        raise ValueError(f"a job of a dedup mode needs a jid of plain text, not {jid!r}")
    text = jid.encode()
    if raw.startswith(b'{"jid":"' + text + b'"'):
        return raw, _AT_FRONT
    payload = json.loads(raw)
    while True:  # a marker that occurs once: a token of 128 random bits, as good as sure
        marker = secrets.token_hex(16)
        payload["jid"] = marker  # the same key: its place in the payload is kept
        encoded = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()
        if encoded.count(marker.encode()) == 1:
            head, _, tail = encoded.partition(marker.encode())
            return head + text + tail, len(head)


def mark(raw: bytes) -> bytes:
    """``raw`` with ``"coalesce":true`` last (the jid stays where it is): see
    ``COALESCED``. A payload that does not end its object with ``}`` is left as it is."""
    body = raw.rstrip()
    if not body.endswith(b"}") or body.endswith(b"{}"):
        return raw
    return body[:-1] + b"," + COALESCED + b"}"


def _window(name: str, value: object) -> None:
    if value is None:
        raise TypeError(f"{name} needs a number of seconds")
    _seconds(name, value)


@dataclass(frozen=True, slots=True)
class Throttle:
    """``dedup=Throttle(S, key=...)``: the first enqueue of a key runs, any other within
    S seconds of it returns None (module docstring)."""

    seconds: float | timedelta
    key: str | DedupKey | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", plain(self.seconds, "Throttle"))
        _window("Throttle", self.seconds)
        unique.check_key(self.key)

    def fields(self) -> dict[str, Any]:
        return {**NONE, "throttle": seconds_of(self.seconds), "key": self.key}


@dataclass(frozen=True, slots=True)
class Debounce:
    """``dedup=Debounce(S, key=...)``: a burst of enqueues of a key runs once, S seconds
    after the last, with the last arguments (module docstring)."""

    seconds: float | timedelta
    key: str | DedupKey | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", plain(self.seconds, "Debounce"))
        _window("Debounce", self.seconds)
        unique.check_key(self.key)

    def fields(self) -> dict[str, Any]:
        return {**NONE, "debounce": seconds_of(self.seconds), "key": self.key}


@dataclass(frozen=True, slots=True)
class Coalesce:
    """``dedup=Coalesce(key=...)``: enqueues of a key merge into the one waiting, or keep
    one follow-up of the one running (module docstring)."""

    key: str | DedupKey | None = None

    def __post_init__(self) -> None:
        unique.check_key(self.key)

    def fields(self) -> dict[str, Any]:
        return {**NONE, "coalesce": True, "key": self.key}


Dedup = unique.Unique | Throttle | Debounce | Coalesce
"""A value of the dedup family (``dedup=``)."""
NONE: Final[Mapping[str, Any]] = {"unique": None, "unique_key": None, "throttle": None,
                                  "debounce": None, "coalesce": False, "key": None}
"""The family's ``JobOptions`` fields when none of it is on: what a value starts from."""


def fields_of(value: object) -> dict[str, Any]:
    """The ``JobOptions`` fields of ``dedup=value`` (the whole family), or a TypeError."""
    if isinstance(value, unique.Unique):
        return {**NONE, **value.fields()}
    if isinstance(value, Throttle | Debounce | Coalesce):
        return value.fields()
    raise TypeError("dedup takes Unique(...), Throttle(seconds), Debounce(seconds) or "
                    f"Coalesce(), not {value!r}")
