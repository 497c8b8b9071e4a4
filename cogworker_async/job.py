"""Jobs on the wire: building payloads, encoding them as JSON, and reading them back.

Vocabulary: ``raw`` is the stored bytes, ``payload`` the decoded dict. Only JSON is ever
written or read (never pickle), and reading trusts nothing: whatever is not a JSON
object naming a job raises ``UnparseablePayload`` and is filed in dead as it was.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any, Final

from cogworker_async.errors import PayloadTooLarge, SerializationError, UnparseablePayload

Payload = dict[str, Any]

PREVIEW_CHARS: Final = 2000
"""How much of an unparseable payload its dead entry shows as text."""


def new_jid() -> str:
    """A fresh job id: 24 hex digits (96 random bits). Unique, not secret: drawn from
    ``random`` (reseeded in each forked child), which costs no system call per job."""
    return f"{random.getrandbits(96):024x}"


def _refuse(value: object) -> object:
    raise SerializationError(
        f"job arguments must be JSON-serialisable: got a {type(value).__name__} "
        f"({_short_repr(value)})"
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
            and _PLAIN.issuperset(map(type, kwargs.values())):
        return raw  # the common case, flat scalar arguments, checked at C speed
    problem = unfaithful(args, kwargs)
    if problem is not None:
        raise SerializationError(f"job arguments must come back from JSON unchanged: {problem}")
    return raw


_PLAIN: Final = frozenset({str, int, float, bool, type(None)})


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


def build(
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    queue: str,
    retry: bool | int,
    now: float,
    jid: str | None = None,
) -> Payload:
    """A new job's payload."""
    return {
        "jid": jid or new_jid(),
        "class": name,
        "args": list(args),
        "kwargs": dict(kwargs),
        "queue": queue,
        "retry": retry,
        "created_at": now,
        "enqueued_at": now,
    }


def decode(raw: bytes, max_bytes: int) -> Payload:
    """Read a stored job, or raise ``UnparseablePayload`` saying why it is not one."""
    if len(raw) > max_bytes:
        raise UnparseablePayload(f"payload of {len(raw)} bytes is over the limit of {max_bytes}")
    try:
        # Decoded as UTF-8 first: json.loads(bytes) would also guess UTF-16/32, and let
        # surrogates written as raw bytes through; a job is UTF-8 JSON or it is not one.
        payload = json.loads(raw.decode("utf-8"))
    except Exception as exc:  # JSONDecodeError, UnicodeDecodeError, RecursionError, ...
        raise UnparseablePayload(f"not JSON: {type(exc).__name__}: {exc}"[:500]) from None
    if not isinstance(payload, dict):
        raise UnparseablePayload(f"a JSON {type(payload).__name__}, not an object")
    for field, kind in (("jid", str), ("class", str)):
        if not isinstance(payload.get(field), kind):
            raise UnparseablePayload(f"no {field!r} string in the payload")
    for field in KEYED_FIELDS:
        value = payload.get(field)
        if isinstance(value, str) and not _is_text(value):
            # A JSON escape can carry a lone surrogate ("\ud800"), which no key name
            # can hold: the job's ack or lock release would fail on every try.
            raise UnparseablePayload(f"{field!r} is not valid Unicode text")
    if not isinstance(payload.setdefault("args", []), list):
        raise UnparseablePayload("'args' is not a list")
    if not isinstance(payload.setdefault("kwargs", {}), dict):
        raise UnparseablePayload("'kwargs' is not an object")
    return payload


KEYED_FIELDS: Final = ("jid", "class", "queue", "periodic", "unique_digest")
"""Payload fields that end up in Redis key names (or log lines that name the job)."""


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unparseable_entry(raw: bytes, *, queue: str, reason: str, now: float) -> Payload:
    """The dead entry of a raw job that could not be read: its exact bytes are kept.

    The bytes go in base64 (they may not even be UTF-8), with a text preview for people.
    """
    preview = raw[: PREVIEW_CHARS * 4].decode("utf-8", "replace")[:PREVIEW_CHARS]
    return {
        "jid": new_jid(),
        "class": None,
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


def jid_of(raw: bytes) -> str | None:
    """The jid of a raw job if it has one (for log lines and counters), else None."""
    try:
        payload = json.loads(raw)
    except Exception:
        return None
    jid = payload.get("jid") if isinstance(payload, dict) else None
    return jid if isinstance(jid, str) else None
