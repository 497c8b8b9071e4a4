"""Jobs as values: what a job's status record says, read into a ``JobStatus``.

Every job has a record in its queue's slot from its enqueue until a while after its end:
a field of the queue's live hash while it may run (``Keys.live_records``), its own key
once it finished (``Keys.record``); ``lua/_record.lua`` has the layout, ``unpack`` reads
it. Each script that moves the job writes the new state in the same step as the move, so
a record is never half-way between two moves, and a crash between two scripts leaves it
saying where the job really is. This module is the pure half: the states, the TTLs, and
reading a record. The lookups, ``result()``'s wait and ``cancel`` are in ``enqueue/lookup.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from cogworker_async.jobs import stored

State = Literal["queued", "scheduled", "running", "retrying", "dead", "succeeded",
                "cancelled", "unknown", "waiting"]
STATES: Final[tuple[State, ...]] = ("queued", "scheduled", "running", "retrying", "dead",
                                    "succeeded", "cancelled", "unknown", "waiting")
ALIVE: Final = frozenset({"queued", "scheduled", "running", "retrying", "waiting"})
"""States of a job that may still run: an enqueue that chooses its jid refuses them."""
FINISHED: Final = frozenset({"succeeded", "dead", "cancelled"})

CancelOutcome = Literal["cancelled", "stopping", "finished", "unknown"]
"""What ``cancel(jid)`` did (``lua/cancel.lua``): ``cancelled`` — it was queued, scheduled
or retrying and will never run; ``stopping`` — it is running and its process was asked
to stop it (an async job is cancelled within a second; a plain function sees
``current_job().cancel_requested``); ``finished`` — it had ended, nothing done;
``unknown`` — no record (never enqueued, or expired), nothing done. A repeated cancel
gives the first one's answer (``cancelled`` or ``stopping``) until the job's copy is gone."""

LIVE_TTL: Final = 14 * 24 * 3600
"""Seconds a record of a job that has not ended lives after its enqueue or its last retry
(a scheduled job's from its due time; the workers' sweep drops it past that): a queue
that lost its jobs (cleared by hand) cannot leave records forever. A job waiting longer
than this is still run; its status then says ``unknown`` until it ends (the end writes a
record again)."""
CANCELS_TTL: Final = 24 * 3600
"""Seconds a process's cancel set lives after its last cancel: a dead process's set
goes away on its own (recovery drops the cancelled jobs through their records)."""

MAX_JID_CHARS: Final = 200
"""Longest caller-chosen jid (``options(jid=...)``): it is part of key names."""


@dataclass(frozen=True, slots=True)
class Ended:
    """How a job that ran ended, for its ack (``lua/ack.lua``) and its status record."""

    state: Literal["succeeded", "cancelled"] = "succeeded"
    result: bytes | None = None
    """Its return value as JSON, when it keeps one."""
    keep: float | None = None
    """Seconds its record (and result) is kept; None: ``Settings.keep_status``."""


SUCCEEDED: Final = Ended()
CANCELLED: Final = Ended("cancelled")


def check_jid(jid: object) -> str:
    """A caller-chosen jid, or a TypeError/ValueError saying why it cannot be one."""
    if not isinstance(jid, str):
        raise TypeError(f"a jid must be a str, not {type(jid).__name__}")
    if not jid or len(jid) > MAX_JID_CHARS:
        raise ValueError(f"a jid must be 1 to {MAX_JID_CHARS} characters, got {len(jid)}")
    if not jid.isprintable() or '"' in jid or "\\" in jid:
        raise ValueError(f"a jid must be printable text without quotes or backslashes: "
                         f"{jid!r}")
    try:
        jid.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"a jid must be valid Unicode text: {jid!r}") from None
    return jid


def check_keep_result(seconds: object) -> float | None:
    """``keep_result``: None (keep none) or a positive number of seconds (at most a year)."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"keep_result must be a number of seconds, not "
                        f"{type(seconds).__name__}")
    if not 0 < seconds <= 366 * 24 * 3600:  # False for NaN too
        raise ValueError(f"keep_result must be seconds > 0 and <= one year, got {seconds!r}")
    return float(seconds)


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What became of one job, as its status record says."""

    jid: str
    state: State
    queue: str | None = None
    name: str | None = None
    """The registered job name (its payload's ``class``)."""
    attempt: int | None = None
    """The run it is at (1 for the first); for a dead job, its last."""
    enqueued_at: float | None = None
    started_at: float | None = None
    """When its last run started."""
    finished_at: float | None = None
    process: str | None = None
    """The identity of the process running it (``running``), or that last ran it."""
    progress: float | None = None
    """0..1, as the job last said (``current_job().set_progress``)."""
    info: Any = None
    """What the job said with its progress (JSON)."""
    result: Any = None
    """The return value, for a job that keeps its result and succeeded."""
    has_result: bool = False
    """Whether a result is stored (a job may return None)."""
    error: str | None = None
    """``Class: message`` of its last failure (retrying, dead)."""
    cancel_requested: bool = False
    batch: str | None = None
    """The bid of the batch it is a member of (``jobs.batch``). A batch's callback is
    no member: its record names none (its payload's ``bid`` says whose it is)."""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def as_dict(self) -> dict[str, Any]:
        """Every field, as JSON-ready values (the CLI's ``--json``)."""
        return {field: getattr(self, field) for field in self.__slots__}


def unknown(jid: str) -> JobStatus:
    return JobStatus(jid=jid, state="unknown")


def read(jid: str, record: Mapping[bytes, bytes] | Mapping[str, str],
         queue: str | None = None) -> JobStatus:
    """A record (``HGETALL``) of a job of ``queue`` as a JobStatus; a missing record is
    ``unknown``. Reads defensively: a record is written by scripts, but Redis is shared."""
    fields = {_text(key): _text(value) for key, value in record.items()}
    state = fields.get("state")
    if state not in STATES:
        return unknown(jid)
    has_result = "result" in fields
    return JobStatus(
        jid=jid, state=state,  # checked against STATES
        queue=queue, name=fields.get("name"),
        attempt=_int(fields.get("attempt")) or 1,  # written once a run failed
        enqueued_at=_number(fields.get("enqueued_at")),
        started_at=_number(fields.get("started_at")),
        finished_at=_number(fields.get("finished_at")),
        process=fields.get("by"),
        progress=_number(fields.get("progress")),
        info=_json(fields.get("info")),
        result=_json(fields.get("result")) if has_result else None,
        has_result=has_result,
        error=fields.get("error"),
        cancel_requested=fields.get("cancel") == "1",
        batch=fields.get("batch") or None,
    )


def unpack(text: bytes | str) -> dict[str, str]:
    """A live record as ``lua/_record.lua`` packs it — ``state``, ``name``,
    ``enqueued_at``, ``until``, then ``field=value`` pairs, tab-separated — as fields;
    ``{}`` for text that is not one."""
    parts = _text(text).split("\t")
    if len(parts) < 4:
        return {}
    fields = {name: value for name, value in zip(
        ("state", "name", "enqueued_at", "until"), parts, strict=False) if value}
    for part in parts[4:]:
        name, equals, value = part.partition("=")
        if equals:
            fields[name] = value
    return fields


def newest(statuses: list[JobStatus]) -> JobStatus | None:
    """Of a jid's records in several queues (a jid reused across queues), the one
    enqueued last; None if there is none."""
    found = [status for status in statuses if status.state != "unknown"]
    if not found:
        return None
    return max(found, key=lambda status: status.enqueued_at or 0.0)


def error_text(error_class: str, message: str) -> str:
    """A failure as a record keeps it: ``Class: message``, bounded."""
    text = f"{error_class}: {message}" if message else error_class
    return text[:MAX_ERROR_CHARS]


MAX_ERROR_CHARS: Final = 2000


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _number(text: str | None) -> float | None:
    return stored.number(text)  # NaN, infinite, huge: None


def _int(text: str | None) -> int | None:
    return stored.integer(text)


def _json(text: str | None) -> Any:
    """A JSON field (a result, a progress info) as its value; one that cannot be read
    (not JSON, nested too deep to parse) as the text stored: shown as it is."""
    if text is None:
        return None
    value = stored.json_value(text, max_depth=None)  # a job's own value: any depth
    return text if value is stored.DAMAGED else value
