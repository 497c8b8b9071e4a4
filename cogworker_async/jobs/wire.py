"""Jobs on the wire: building payloads, encoding them as JSON, and reading them back.

Vocabulary: ``raw`` is the stored bytes, ``payload`` the decoded dict. Only JSON is ever
written or read (never pickle), and reading trusts nothing: whatever is not a JSON
object naming a job raises ``UnparseablePayload`` and is filed in dead as it was.
"""

from __future__ import annotations

import base64
import json
import math
import random
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, Required, TypedDict, cast

from cogworker_async.errors import PayloadTooLarge, SerializationError, UnparseablePayload
from cogworker_async.jobs.names import check_queue_name
from cogworker_async.jobs.unique import UniquePolicy

Payload = TypedDict("Payload", {
    # the fields every job has (``build``); ``queue`` and ``enqueued_at`` are
    # written again when a job goes back on a queue (worker/poller.py, admin/sets.py):
    "jid": Required[str],
    # priority.py's: the job's priority when not 0, right after the jid (so that a
    # script finds it with an anchored match, redis/lua/_queue.lua):
    "priority": int,
    # groups.py's: the job's group, after its priority (found the same way):
    "group": str,
    "class": Required[str],
    "args": Required[list[Any]],
    "kwargs": Required[dict[str, Any]],
    "queue": str,
    "created_at": float | None,
    "enqueued_at": float | None,
    # retries.py's: the retries a job has, and how many it used:
    "retry": bool | int,
    "retry_count": int,
    # worker/outcome.py's: its last failure (``after_failure``, ``interrupt``):
    "error_class": str,
    "error_message": str,
    "error_backtrace": list[str],
    "failed_at": float,
    "retried_at": float,
    "interrupted_count": int,
    # workflows/batch.py's: the batch a job is a member of (its record says so too, for the note
    # its end writes: redis/lua/_record.lua):
    "bid": str,
    "batch_callback": str,
    # unique.py's: client.mark_unique writes them, worker/locks.py reads them:
    "unique_digest": str,
    "unique_policy": UniquePolicy,
    "unique_ttl": float,
    # periodic.py's: worker/cron.py writes them, worker/locks.py reads ``periodic``:
    "periodic": str,
    "periodic_tick": float,
    # status.py's: seconds the job's result is kept (``keep_result``), written by the
    # client, read by the worker when it acks (worker/processor.py):
    "keep_result": float,
    # worker/execute.py's: seconds a run may take (``timeout``, the decorator's or the
    # enqueue's ``options(timeout=)``), written by the client, applied by the worker:
    "timeout": float,
    # worker/outcome.py's (``expired``): when the job must have started by (epoch s),
    # and whether it then goes to dead (absent: it does), written by the client:
    "expires_at": float,
    "dead_on_expiry": bool,
    # worker/outcome.py's (``after_over_limit``): reschedules by limiters, and the last:
    "limited_count": int,
    "limited_at": float,
    # enqueue/after.py's: the parent whose result a job takes, absent from its first
    # argument (null there): written in its dead entry by dep_apply.lua, refused by the
    # worker (worker/admission.py, ``BadArguments``) should the entry be retried:
    "missing_result_of": str,
    # observe/tracing.py's: the enqueue's trace context (W3C ``traceparent``, ``tracestate``),
    # written by the client (``JobTracer.inject``), read by the run's span (``_parent``):
    "trace": dict[str, str],
    # jobs/dedup.py's (``mark``): a job of a coalesced key, written last by the client, read by
    # a basic-fetch worker to take the job's merge (worker/fetch.py):
    "coalesce": bool,
    # A dead entry's: the bytes of what was not a job (``unparseable_entry``), and the
    # process that kept dying with it (worker/recovery.py, ``process_died_entry``):
    "raw_payload_base64": str,
    "raw_payload_preview": str,
    "orphaned_from": str,
    "orphaned_process": dict[str, Any],
}, total=False)
"""A job as stored: a JSON object (docs/reference/keys.md, "Payloads", lists its fields). Each
group of fields above names the module that owns it: the one that says what the field
means (and the modules that write and read it).

Only for the type checker (a TypedDict is a plain dict at run time: a payload is
never copied or validated field by field on the hot path), so that a misspelt field
name is a mypy error. The types are what this package writes. What is read back from
Redis may hold anything: ``decode`` checks ``jid``, ``class``, ``args`` and ``kwargs``
only, so every other field is read through the accessors below (``text``, ``number``,
``count``, ``queue_of``...), which check the type at run time.

Middleware may add fields of its own (``enqueue.payload["tenant"] = "acme"``): the
middleware's ``Enqueue.payload`` and the job's ``JobContext.payload`` stay
``dict[str, Any]``, and the client and the executor cast at that boundary.
"""

Field = Literal[
    "jid", "priority", "group", "class", "args", "kwargs", "queue", "created_at", "enqueued_at",
    "retry",
    "retry_count", "error_class", "error_message", "error_backtrace", "failed_at",
    "retried_at", "interrupted_count", "unique_digest", "unique_policy", "unique_ttl",
    "periodic", "periodic_tick", "keep_result", "timeout", "expires_at", "dead_on_expiry",
    "limited_count", "limited_at", "missing_result_of", "coalesce", "trace", "bid",
    "batch_callback",
    "raw_payload_base64", "raw_payload_preview", "orphaned_from", "orphaned_process",
]
"""The name of a ``Payload`` field: what the accessors take, so that mypy checks it
(tests/jobs/test_job.py::test_field_names_are_the_payload_keys pins it to ``Payload``)."""

NO_SIZE_LIMIT: Final = sys.maxsize
"""``max_bytes`` for an ``encode``/``decode`` that must never refuse for size (a job
that is already stored: Redis' own 512 MB string limit bounds it)."""

PREVIEW_CHARS: Final = 2000
"""How much of an unparseable payload its dead entry shows as text."""


def new_jid() -> str:
    """A fresh job id: 24 hex digits (96 random bits). Unique, not secret: drawn from
    ``random`` (reseeded in each forked child), which costs no system call per job."""
    return f"{random.getrandbits(96):024x}"


_CONVERSIONS: Final = {
    "datetime": "pass value.isoformat() (datetime.fromisoformat() in the job)",
    "date": "pass value.isoformat() (date.fromisoformat() in the job)",
    "time": "pass value.isoformat() (time.fromisoformat() in the job)",
    "timedelta": "pass value.total_seconds()",
    "Decimal": "pass str(value) (Decimal(text) in the job: a float would round it)",
    "UUID": "pass str(value) (UUID(text) in the job)",
}
"""The fix for the non-JSON arguments callers pass most, by type name: the refusal
names the conversion rather than leave a caller to guess one (a float for a Decimal
would lose cents)."""


def _refuse(value: object) -> object:
    name = type(value).__name__
    conversion = _CONVERSIONS.get(name)
    raise SerializationError(
        f"job arguments must be JSON-serialisable: got a {name} ({_short_repr(value)})"
        + (f"; {conversion}" if conversion else "")
    )


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# Built once: json.dumps with options builds a new encoder on every call.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_refuse)


def encode(payload: Mapping[str, Any], max_bytes: int) -> bytes:
    """Encode a payload as compact JSON; refuse what is not JSON or is too large."""
    try:
        text = _ENCODER.encode(payload)
    except SerializationError:
        raise
    except (TypeError, ValueError) as exc:  # non-str dict keys, NaN/inf, ...
        raise SerializationError(f"job arguments must be JSON-serialisable: {exc}") from exc
    except RecursionError as exc:
        raise SerializationError("job arguments are nested too deeply to encode") from exc
    raw = text.encode("utf-8")
    if len(raw) > max_bytes:
        raise PayloadTooLarge(
            f"job {payload.get('class')!r} encodes to {len(raw)} bytes, over the limit of "
            f"{max_bytes} (max_payload_bytes): pass a reference (an id, a path) instead"
        )
    return raw


def encode_new(payload: Mapping[str, Any], max_bytes: int) -> bytes:
    """Encode a job being enqueued: as ``encode``, and refuse arguments that JSON would
    not bring back as they were (the worker must receive exactly what was passed)."""
    raw = encode(payload, max_bytes)  # first: it refuses circular structures
    args, kwargs = payload.get("args"), payload.get("kwargs")
    if type(args) is list and type(kwargs) is dict and _PLAIN.issuperset(map(type, args)) \
            and _PLAIN.issuperset(map(type, kwargs.values())) \
            and _STR_ONLY.issuperset(map(type, kwargs)):  # middleware may add keys
        return raw  # the common case, flat scalar arguments, checked at C speed
    problem = unfaithful(args, kwargs)
    if problem is not None:
        raise SerializationError(f"job arguments must come back from JSON unchanged: {problem}")
    return raw


_PLAIN: Final = frozenset({str, int, float, bool, type(None)})
_STR_ONLY: Final = frozenset({str})


def unfaithful(*values: object) -> str | None:
    """What in ``values`` JSON would change on the way to the worker, or None.

    JSON turns a tuple into a list, a dict key 1 into "1" (so ``{1: "a", "1": "b"}``
    loses one), and a subclass (an ``IntEnum``, a ``StrEnum``, an ``OrderedDict``) into its
    plain base type. Called after ``encode`` succeeded, so the values hold no cycle.
    """
    stack: list[Any] = list(values)
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind in _PLAIN:
            continue
        if kind is list:
            stack.extend(value)
        elif kind is dict:
            for key in value:
                if type(key) is not str:
                    return (f"dict key {_short_repr(key)} ({type(key).__name__}) is not a str "
                            "(JSON would turn it into a string)")
            stack.extend(value.values())
        elif kind is tuple:
            return f"{_short_repr(value)} is a tuple (JSON brings it back as a list: pass a list)"
        else:
            return (f"{_short_repr(value)} ({kind.__name__}) would come back as a plain "
                    f"{_json_kind(value)}")
    return None


def _json_kind(value: object) -> str:
    for base in (bool, int, float, str, list, dict):
        if isinstance(value, base):
            return base.__name__
    return "value"


def encode_result(value: Any, max_bytes: int) -> bytes:
    """A job's return value as JSON, to keep (``keep_result``); TypeError/ValueError
    saying why it cannot be (not JSON, JSON that would not bring it back as it was —
    a tuple, a dict with non-str keys, an enum —, too large)."""
    try:
        raw = _RESULT_ENCODER.encode(value).encode("utf-8")
    except RecursionError:
        raise ValueError("the result is nested too deeply to encode") from None
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the result is not JSON: {exc}") from None
    if type(value) not in _PLAIN:  # a result comes back exactly, as arguments do
        problem = unfaithful(value)
        if problem is not None:
            raise TypeError(f"the result would not come back from JSON unchanged: {problem}")
    if len(raw) > max_bytes:
        raise ValueError(f"the result encodes to {len(raw)} bytes, over the limit of "
                         f"{max_bytes} (max_payload_bytes)")
    return raw


_RESULT_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def build(
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    queue: str,
    retry: bool | int,
    now: float,
    jid: str | None = None,
    keep_result: float | None = None,
    expires_at: float | None = None,
    dead_on_expiry: bool = True,
    bid: str | None = None,
    priority: int = 0,
    group: str | None = None,
    timeout: float | None = None,
) -> Payload:
    """A new job's payload (optional fields only when set: no cost to a job without)."""
    payload: Payload = {
        "jid": jid or new_jid(),
        "class": name,
        "args": list(args),
        "kwargs": dict(kwargs),
        "queue": queue,
        "retry": retry,
        "created_at": now,
        "enqueued_at": now,
    }
    if priority or group:  # after the jid, where the scripts look (redis/lua/_queue.lua)
        front: dict[str, Any] = {"jid": payload["jid"]}
        if priority:
            front["priority"] = priority
        if group:
            front["group"] = group
        payload = cast("Payload", {**front, **payload})
    if keep_result is not None:
        payload["keep_result"] = keep_result
    if timeout is not None:
        payload["timeout"] = timeout
    if bid is not None:
        payload["bid"] = bid
    if expires_at is not None:
        payload["expires_at"] = expires_at
        if not dead_on_expiry:
            payload["dead_on_expiry"] = False
    return payload


def decode(raw: bytes, max_bytes: int) -> Payload:
    """Read a stored job, or raise ``UnparseablePayload`` saying why it is not one."""
    if len(raw) > max_bytes:
        raise UnparseablePayload(f"payload of {len(raw)} bytes is over the limit of {max_bytes}")
    try:
        # Decoded as UTF-8 first: json.loads(bytes) would also guess UTF-16/32, and let
        # surrogates written as raw bytes through; a job is UTF-8 JSON or it is not one.
        # Typed as the job it should be, checked as the anything it may be.
        payload: Payload = json.loads(raw.decode("utf-8"))
    except Exception as exc:  # JSONDecodeError, UnicodeDecodeError, RecursionError, ...
        raise UnparseablePayload(f"not JSON: {type(exc).__name__}: {exc}"[:500]) from None
    if not isinstance(payload, dict):
        raise UnparseablePayload(f"a JSON {type(payload).__name__}, not an object")
    for field, kind in (("jid", str), ("class", str)):
        if not isinstance(payload.get(field), kind):
            raise UnparseablePayload(f"no {field!r} string in the payload")
    for field in KEYED_FIELDS:
        found = payload.get(field)
        if isinstance(found, str) and not _is_text(found):
            # A JSON escape can carry a lone surrogate ("\ud800"), which no key name
            # can hold: the job's ack or lock release would fail on every try.
            raise UnparseablePayload(f"{field!r} is not valid Unicode text")
    if not isinstance(payload.setdefault("args", []), list):
        raise UnparseablePayload("'args' is not a list")
    if not isinstance(payload.setdefault("kwargs", {}), dict):
        raise UnparseablePayload("'kwargs' is not an object")
    return payload


KEYED_FIELDS: Final[tuple[Field, ...]] = ("jid", "class", "queue", "periodic", "unique_digest")
"""Payload fields that end up in Redis key names (or log lines that name the job)."""


def _is_text(string: str) -> bool:
    try:
        string.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unparseable_entry(raw: bytes, *, queue: str, reason: str, now: float) -> Payload:
    """The dead entry of a raw job that could not be read: its exact bytes are kept.

    The bytes go in base64 (they may not even be UTF-8), with a text preview for people.
    """
    preview = raw[: PREVIEW_CHARS * 4].decode("utf-8", "replace")[:PREVIEW_CHARS]
    return {
        # Its own jid when one can be read: the fetch marked that jid's record running,
        # and the filing must end that record (a batch member's end is noted from it,
        # a waiting dependent hears it); a fresh one for bytes that name none.
        "jid": _readable_jid(raw) or new_jid(),
        # No class: what is not a job names none, and so can never run (``decode``
        # refuses it, and an admin's retry with it: ``JobRecord.runnable``).
        "class": None,  # type: ignore[typeddict-item]
        "args": [],
        "kwargs": {},
        "queue": queue,
        "retry": False,
        "created_at": None,
        "enqueued_at": None,
        "error_class": "UnparseablePayload",
        "error_message": reason,
        "failed_at": now,
        "raw_payload_base64": base64.b64encode(raw).decode("ascii"),
        "raw_payload_preview": preview,
    }


# -- reading fields -----------------------------------------------------------------
# A stored payload may hold anything in any field (bad data, another version, a
# person's hand): these read one field as the type it should have, or None.


def value(payload: Mapping[str, Any], field: Field, default: Any = None) -> Any:
    """A field as stored, whatever it holds (``default`` if absent)."""
    return payload.get(field, default)


def has(payload: Mapping[str, Any], field: Field) -> bool:
    return field in payload


def text(payload: Mapping[str, Any], field: Field) -> str | None:
    """A field that should hold a string, or None."""
    found = payload.get(field)
    return found if isinstance(found, str) else None


def jid(payload: Mapping[str, Any]) -> str | None:
    """The payload's jid, or None (``jid_of`` reads it from raw bytes)."""
    return text(payload, "jid")


def name(payload: Mapping[str, Any]) -> str | None:
    """The registered name of the job (its ``class``), or None."""
    return text(payload, "class")


def count(payload: Mapping[str, Any], field: Field) -> int | None:
    """A field that should hold an int (``retry_count``...): a bool is not one."""
    found = payload.get(field)
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def number(payload: Mapping[str, Any], field: Field) -> float | None:
    """A field that should hold a number (``enqueued_at``, ``unique_ttl``...), as a
    finite float, or None."""
    return finite_number(payload.get(field))


def finite_number(found: object) -> float | None:
    """A stored number as a finite float, or None (not a number, a bool, NaN, infinite,
    or an int past a float's range: ``math.isfinite`` raises OverflowError on those)."""
    if type(found) is float:  # first, the common case: a stamp as JSON reads it
        return found if math.isfinite(found) else None
    if isinstance(found, int | float) and not isinstance(found, bool):
        try:
            return float(found) if math.isfinite(found) else None
        except OverflowError:
            return None
    return None


def timeout_of(payload: Mapping[str, Any], declared: float | None,
               cap: float) -> float | None:
    """Seconds a run of this job may take: the payload's ``timeout`` (what the enqueue
    used: the decorator's, or ``options(timeout=)``), else ``declared`` (the worker's
    decorator: a job enqueued without one, by an older client or by cron). A stored
    value that is not a number in (0, ``cap``] is ignored, as if absent."""
    found = number(payload, "timeout")
    return found if found is not None and 0 < found <= cap else declared


def args_of(payload: Mapping[str, Any]) -> list[Any]:
    found = payload.get("args")
    return found if isinstance(found, list) else []


def kwargs_of(payload: Mapping[str, Any]) -> dict[str, Any]:
    found = payload.get("kwargs")
    return found if isinstance(found, dict) else {}


def queue_of(payload: Mapping[str, Any] | None, fallback: str) -> str:
    """The queue a stored job belongs on: its ``queue`` field if that is a valid queue
    name, else ``fallback``. Where a job lives no longer depends on it (every key of a
    job is in the slot of the queue it was pushed on, and moves stay there): it names
    the queue of an entry read on its own, as the dashboard does."""
    try:
        return check_queue_name(payload.get("queue") if payload is not None else None)
    except (TypeError, ValueError):
        return fallback


def _readable_jid(raw: bytes) -> str | None:
    """The jid a raw job names (as ``fetch.lua``'s ``jid_in`` reads it), if it is text
    a record's key can hold."""
    jid = jid_of(raw)
    return jid if jid and _is_text(jid) else None


def priority_of(raw: bytes) -> int:
    """The priority a raw job names (0 if none, or not a valid one), as the scripts read
    it (``redis/lua/_queue.lua``)."""
    if b'"priority":' not in raw:
        return 0
    try:
        found = json.loads(raw).get("priority")
    except Exception:
        return 0
    return found if type(found) is int and -10 <= found <= 10 else 0


def jid_of(raw: bytes) -> str | None:
    """The jid of a raw job if it has one (for log lines and counters), else None."""
    try:
        payload = json.loads(raw)
    except Exception:
        return None
    jid = payload.get("jid") if isinstance(payload, dict) else None
    return jid if isinstance(jid, str) else None
