"""Reading what Redis holds: a stored JSON value or number, or "damaged".

Redis is shared. A co-tenant, a person with ``redis-cli``, a bug or an older version can
leave anything under a key this project reads: JSON nested past the parser's recursion
limit (a ``RecursionError``, not a ``ValueError``), bytes that are not UTF-8, numbers no
float can hold (``1e999`` reads as infinity; ``int(inf)`` and ``float(10**400)`` raise
``OverflowError``), a value of the wrong shape. Every reader of stored JSON and of
stored numbers goes through here, so that a damaged entry reads as damaged (``None``,
or ``DAMAGED`` where None is a value) and is shown as damaged: it never stops the loop
that read it — a recovery pass (the dead process's jobs wait on nothing it said about
itself), a dashboard page, a CLI command, ``--burst``.

Jobs themselves are read by ``wire.decode`` (which says why one is not a job); this is
for everything else: status records, beats, the workers hash, recoveries, the limiter
registry and state, pause flags, hand-over records, run metrics.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

MAX_DEPTH: Final = 64
"""Levels of nesting past which a stored value of the project's own (a beat, a pause
flag, a limiter's entry...) is damaged: what it writes is at most a few levels deep, and
a value near the parser's limit would raise RecursionError again when written back
(``json.dumps`` of a recovery event that quotes a beat) or rendered."""
MAX_NUMBER: Final = 2**63
"""Magnitude past which a stored number is damaged: Redis's own integers stop there
(``HINCRBY``, ``INCR``), and every sum, mean or rate of smaller ones still fits a float."""


class _Damaged:
    """The type of ``DAMAGED``: what stands for a stored value that could not be read,
    where None is a value (a job's result may be ``null``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DAMAGED"

    def __bool__(self) -> bool:
        return False


DAMAGED: Final = _Damaged()


def json_value(raw: object, *, max_depth: int | None = MAX_DEPTH) -> Any:
    """``raw`` (bytes or str) as the JSON value it holds, or ``DAMAGED``: not UTF-8, not
    JSON, too deep to parse or nested past ``max_depth`` (None: only the parser's limit,
    for a value a job produced, such as its result). Never raises."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
        if not isinstance(text, str):
            return DAMAGED
        value = json.loads(text)
    except (RecursionError, ValueError, UnicodeDecodeError, TypeError, MemoryError):
        return DAMAGED  # JSONDecodeError and UnicodeDecodeError are ValueErrors
    if max_depth is not None and _deeper_than(value, max_depth):
        return DAMAGED
    return value


def json_object(raw: object, *, max_depth: int = MAX_DEPTH) -> dict[str, Any] | None:
    """``raw`` as the JSON object it should hold, or None (absent, damaged, another
    shape: a list, a string...)."""
    if raw is None:
        return None
    value = json_value(raw, max_depth=max_depth)
    return value if isinstance(value, dict) else None


def number(raw: object) -> float | None:
    """A stored number (bytes, str, int or float) as a finite float of magnitude under
    ``MAX_NUMBER``, or None: absent, not a number, a bool, NaN, infinite, huge."""
    if isinstance(raw, bool) or raw is None:
        return None
    try:
        if isinstance(raw, bytes | bytearray):
            raw = raw.decode("ascii")
        value = float(raw)  # type: ignore[arg-type]  # anything: refused below
    except (TypeError, ValueError, OverflowError, UnicodeDecodeError):
        return None
    return value if math.isfinite(value) and abs(value) < MAX_NUMBER else None


def integer(raw: object) -> int | None:
    """A stored integer (a counter, a capacity, a count) of magnitude under
    ``MAX_NUMBER``, or None; a number with a fraction is cut to its integer part."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw if abs(raw) < MAX_NUMBER else None
    if isinstance(raw, bytes | bytearray | str):
        try:  # exact for the integers a counter holds, past a float's 53 bits
            value = int(raw)
        except ValueError:
            pass
        else:
            return value if abs(value) < MAX_NUMBER else None
    found = number(raw)
    return int(found) if found is not None else None


def _deeper_than(value: Any, limit: int) -> bool:
    """Is ``value`` nested more than ``limit`` levels? Iterative: a value the parser
    accepted can still be too deep for a recursive walk."""
    level: list[Any] = [value]
    for _ in range(limit + 1):
        level = [child for item in level if isinstance(item, dict | list)
                 for child in (item.values() if isinstance(item, dict) else item)]
        if not level:
            return False
    return True
