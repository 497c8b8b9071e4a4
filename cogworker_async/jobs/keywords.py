"""The options a job takes, written once: ``@jobs.job(...)`` and ``.options(...)`` take the
same keywords (``JobKeywords``), and ``resolve`` turns them into ``JobOptions`` fields.

Each option family is a value declared beside the rule that reads it, and says itself
which ``JobOptions`` fields it sets (its ``fields()``): ``dedup=`` ``Unique``
(``unique.py``) or ``Throttle``/``Debounce``/``Coalesce`` (``dedup.py``), ``after=After``
(``after.py``), ``retry=RetryPolicy`` (``retries.py``), ``group=Group`` (``groups.py``).
A value replaces its whole family (``.options(dedup=Throttle(5))`` of a unique job is
throttled, not unique); the older flat spellings (``unique=``, ``throttle=``, ``key=``,
``retry_in=``, ``on_parent_failure=``...) still work, change only themselves, and may not
be given beside their family's value. ``None`` is "not given" everywhere: the default on
the decorator, the job's own on a call.

Two keywords belong to one surface, and why:
- ``name`` (decorator only): the registered name a worker looks the payload up by; a
  call's other name would be another job;
- ``jid`` (``.options`` only): a jid names one job; on the decorator every enqueue would
  share it (use ``dedup=Unique(key=...)`` for "one at a time").

One value that a call cannot change: ``RetryPolicy``'s ``delay`` and ``discard_on`` (and
the flat ``retry_in=``, ``discard_on=``) are read by the worker from the registration,
never from a payload, so ``.options()`` refuses them (a ``ValueError`` saying so). So is a
``Group(limit=)`` a call would make new (``groups.py``).

A new plain option is its field in ``JobOptions`` and its line in ``JobKeywords``; a new
value of a family is a class in its rule module with its ``fields()``; then its use in
``wire.build`` if it travels with the job. Neither surface changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, TypedDict

from cogworker_async.jobs import dedup
from cogworker_async.jobs.after import After, parents_of
from cogworker_async.jobs.definition import Delay, JobDefinition, JobOptions, When
from cogworker_async.jobs.groups import Group, GroupKey, group_value
from cogworker_async.jobs.retries import RetryIn, RetryPolicy, check_discard_on
from cogworker_async.jobs.times import epoch_from
from cogworker_async.jobs.unique import UniqueKey, UniquePolicy, policy_of


class JobKeywords(TypedDict, total=False):
    """What ``@jobs.job(...)`` and ``.options(...)`` both take (``**Unpack[...]``), so
    mypy checks a user's call against one list."""

    queue: str | None
    retry: bool | int | RetryPolicy | None
    """Retries after the first run (True: 25), or a ``RetryPolicy``."""
    timeout: Delay | None
    keep_result: Delay | None
    expires_in: Delay | None
    expires_at: When | None
    dead_on_expiry: bool | None
    priority: int | None
    group: str | GroupKey | Group | None
    dedup: dedup.Dedup | None
    """``Unique(...)``, ``Throttle(s)``, ``Debounce(s)`` or ``Coalesce()``."""
    after: Iterable[str] | After | None
    # The older flat spellings, each still working:
    unique: bool | UniquePolicy | None
    unique_ttl: Delay | None
    unique_key: UniqueKey | None
    retry_in: RetryIn | None
    discard_on: Sequence[type[BaseException]] | None
    on_parent_failure: str | None
    pass_result: bool | None
    throttle: Delay | None
    debounce: Delay | None
    coalesce: bool | None
    key: str | None


KEYWORDS: Final = frozenset(JobKeywords.__annotations__)
FAMILIES: Final = {
    "dedup": ("unique", "unique_ttl", "unique_key", "throttle", "debounce", "coalesce",
              "key"),
    "after": ("on_parent_failure", "pass_result"),
    "retry": ("retry_in", "discard_on"),
}
"""A family's value keyword -> the flat spellings that may not be given beside it."""
VALUES: Final = {"dedup": object, "after": After, "retry": RetryPolicy}
"""What a family's keyword must hold for its flat spellings to be refused beside it
(``after=[...]`` and ``retry=5`` are flat themselves)."""
READ_HERE: Final = frozenset({"retry", "unique", "after", "group", "expires_in", "expires_at"})
"""Keywords ``resolve`` reads itself: a value, or a spelling to convert."""
AS_THEY_ARE: Final = tuple(sorted(KEYWORDS.intersection(JobOptions.__dataclass_fields__)
                                  - READ_HERE))
"""Every other keyword is the ``JobOptions`` field of its name, checked there: a new
plain option is its field and its line in ``JobKeywords``."""
ONE_SURFACE: Final = {
    "jid": "jid names one enqueue: give it to .options(jid=...), not to the decorator "
           "(every enqueue would share it; dedup=Unique(key=...) holds one at a time)",
    "name": "name is the registered name a worker looks a payload up by: give it to "
            "@jobs.job(name=...), not to a call (another name would be another job)",
}


@dataclass(frozen=True, slots=True)
class Resolved:
    """One surface's keywords, resolved: the options, and what only a registration
    holds (read by the worker: never in a payload)."""

    options: JobOptions
    retry_in: RetryIn | None = None
    discard_on: tuple[type[BaseException], ...] = ()
    group_limit: int | None = None
    """``Group(limit=)``: the queue's group limit (``groups.with_limit``)."""

    def definition(self, name: str, func: Callable[..., Any]) -> JobDefinition:
        """The registration of ``func`` as ``name`` with these options."""
        return JobDefinition(name, func, self.options, retry_in=self.retry_in,
                             discard_on=self.discard_on)


def resolve(base: JobOptions, given: Mapping[str, Any], *, call: bool) -> Resolved:
    """``given`` (one call's keywords) over ``base``; a TypeError/ValueError naming the
    problem. ``call``: ``.options()`` (which may not change what a worker reads from the
    registration), else the decorator."""
    present = _present(given)
    changes: dict[str, Any] = {name: present[name] for name in AS_THEY_ARE if name in present}
    if "unique" in present:
        changes["unique"] = policy_of(present["unique"])
    if "dedup" in present:
        changes.update(dedup.fields_of(present["dedup"]))
    after = present.get("after")
    if after is not None:
        changes.update(after.fields() if isinstance(after, After)
                       else {"after": parents_of(after)})
    changes.update(_expiry(present))
    group = group_value(present["group"]) if "group" in present else None
    if group is not None:
        changes.update(group.fields())
    retry_in, discard_on = _retries(present, changes)
    if call and (retry_in is not None or discard_on):
        raise ValueError("a retry's delay and discard_on are read by the worker from the "
                         "job's registration, never from a call: declare them on "
                         "@jobs.job(retry=RetryPolicy(...)); a call may change max only")
    return Resolved(replace(base, **changes), retry_in, discard_on,
                    group.limit if group is not None else None)


def _present(given: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords given (not None), each known, none beside its family's value."""
    unknown = sorted(set(given) - KEYWORDS)
    for name in unknown:
        if name in ONE_SURFACE:
            raise TypeError(ONE_SURFACE[name])
    if unknown:
        raise TypeError(f"unexpected option {unknown[0]!r} (the options: "
                        f"{', '.join(sorted(KEYWORDS))})")
    present = {name: value for name, value in given.items() if value is not None}
    for family, flat in FAMILIES.items():
        beside = [name for name in flat if name in present]
        if beside and family in present and isinstance(present[family], VALUES[family]):
            raise ValueError(f"give {family}={present[family]!r} or {beside[0]}=, not both")
    return present


def _retries(present: Mapping[str, Any], changes: dict[str, Any],
             ) -> tuple[RetryIn | None, tuple[type[BaseException], ...]]:
    """The ``retry`` field into ``changes``; (delay function, discard_on) out."""
    retry = present.get("retry")
    if isinstance(retry, RetryPolicy):
        changes["retry"] = retry.max
        return retry.retry_in, retry.discarded
    if retry is not None:
        changes["retry"] = retry
    retry_in = present.get("retry_in")
    if retry_in is not None and not callable(retry_in):
        raise TypeError(f"retry_in must be fn(attempt, error) -> seconds, not {retry_in!r}")
    return retry_in, check_discard_on(present.get("discard_on", ()))


def _expiry(present: Mapping[str, Any]) -> dict[str, Any]:
    """``expires_in`` (seconds or a timedelta) or ``expires_at`` (an aware datetime or
    epoch seconds), one clearing the other."""
    expires_in, expires_at = present.get("expires_in"), present.get("expires_at")
    if expires_in is not None and expires_at is not None:
        raise ValueError("give expires_in or expires_at, not both")
    if expires_in is not None:  # a timedelta is converted, and checked, by JobOptions
        return {"expires_in": expires_in, "expires_at": None}
    if expires_at is not None:
        return {"expires_at": epoch_from(expires_at, "expires_at"), "expires_in": None}
    return {}
