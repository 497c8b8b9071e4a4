"""Dependencies, pure: what ``after=`` may name and how a waiting job meets a parent's end.

``after=After(jids, on_failure="cancel", pass_result=False)`` (or a plain list of jids):
the job waits, state ``waiting``, until every parent succeeded. ``on_failure`` says what
it does when one dies or is cancelled: ``cancel`` (it and its own dependents are
cancelled), ``run`` (it runs anyway) or ``dead`` (filed in dead, naming the parent).
``pass_result`` (exactly one parent): its return value becomes the job's first argument.

This module only checks; the caller's I/O (finding each parent, putting the job waiting)
is ``enqueue/after.py``, the move is ``redis/dependencies.py`` and its scripts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from cogworker_async.jobs.status import check_jid

MAX_PARENTS: Final = 1000
"""Most jobs one job may run after."""
PARENT_FAILURE_POLICIES: Final = ("cancel", "run", "dead")
ParentFailure = Literal["cancel", "run", "dead"]


def check_after(after: object, on_parent_failure: object, pass_result: object) -> None:
    """``after=`` and its companions, or a TypeError/ValueError naming the problem."""
    if not isinstance(after, tuple):
        raise TypeError(f"after must be a list of jids, not {type(after).__name__}")
    for jid in after:
        check_jid(jid)
    if len(set(after)) != len(after):
        raise ValueError(f"after names a jid twice: {list(after)!r}")
    if len(after) > MAX_PARENTS:
        raise ValueError(f"after names {len(after)} jobs, over the limit of {MAX_PARENTS}")
    if on_parent_failure not in PARENT_FAILURE_POLICIES:
        raise ValueError(f"on_parent_failure must be one of {PARENT_FAILURE_POLICIES}, "
                         f"not {on_parent_failure!r}")
    if not isinstance(pass_result, bool):
        raise TypeError(f"pass_result must be True or False, not {pass_result!r}")
    if pass_result and len(after) != 1:
        raise ValueError("pass_result needs exactly one job in after= (whose result it takes)")


def parents_of(after: object) -> tuple[str, ...]:
    """A plain ``after=`` (an iterable of jids) as a tuple; one string is refused (it
    would be read as its characters)."""
    if isinstance(after, str | bytes) or not isinstance(after, Iterable):
        raise TypeError(f"after must be a list of jids, not {type(after).__name__}"
                        + (" (one string)" if isinstance(after, str) else ""))
    return tuple(after)


@dataclass(frozen=True, slots=True)
class After:
    """``after=After(jids, on_failure=..., pass_result=...)``: the jobs this one runs
    after, and what it does when one does not succeed (module docstring). The three
    flat keywords ``after=[...]``, ``on_parent_failure=``, ``pass_result=`` still work."""

    jids: Sequence[str] = ()
    """The parents' jids (kept as a tuple)."""
    on_failure: ParentFailure = "cancel"
    pass_result: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "jids", parents_of(self.jids))
        check_after(self.jids, self.on_failure, self.pass_result)

    def fields(self) -> dict[str, Any]:
        """The ``JobOptions`` fields it sets (the whole family: a value replaces it)."""
        return {"after": tuple(self.jids), "on_parent_failure": self.on_failure,
                "pass_result": self.pass_result}
