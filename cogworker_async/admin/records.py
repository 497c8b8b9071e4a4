"""The admin model's values: what ``Inspector`` reads, as plain immutable records, and
the tokens that name an entry for an action.

A token is where an entry was seen (its score in a set, or its position in a queue) and
a digest of its exact bytes: an action takes the entry with those bytes, or reports it
gone, and never touches a different one. Nothing here does I/O.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar

from cogworker_async.jobs import stored, wire
from cogworker_async.jobs.wire import finite_number as finite_number  # re-exported

PAGE_SIZE: Final = 25
MAX_PAGE_SIZE: Final = 500
TOKEN_DIGEST_LENGTH: Final = 16
"""Hex characters of a token's digest (after its last ``:``)."""

T = TypeVar("T")

_NO_FIELDS: Final[Mapping[str, Any]] = MappingProxyType({})
"""The fields of an entry that is not a JSON object."""


# -- text ------------------------------------------------------------------------------


SERVER_FIELDS: Final = ("server", "version", "used_memory", "used_memory_human",
                        "maxmemory", "connected_clients", "uptime_in_seconds",
                        "cluster_nodes")
"""What ``Inspector.server`` tells (each None when Redis refuses INFO). On a Redis
Cluster it is one node's INFO, and ``cluster_nodes`` how many primaries there are
(None on a single Redis)."""
NO_EVICTION: Final = "noeviction"

# A lone surrogate (U+D800..U+DFFF) is what JSON's "\ud800" escape decodes to: valid
# JSON, not valid Unicode, so UTF-8 output (a page, a terminal, --json) cannot encode
# it and would fail the whole view.
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
REPLACEMENT: Final = "\ufffd"


def printable(text: str) -> str:
    """``text`` with every character UTF-8 cannot encode replaced by U+FFFD: the same
    mark that stored bytes which are not UTF-8 decode to, so a view shows anything a
    job, beat or event holds and says the same thing wherever the text was broken."""
    return _SURROGATE.sub(REPLACEMENT, text)


def eviction_warning(policy: str | None) -> str | None:
    """What to tell an admin about Redis' ``maxmemory-policy`` (None: nothing to say,
    or the policy could not be read)."""
    if policy is None or policy == NO_EVICTION:
        return None
    return (f"Redis' maxmemory-policy is {policy}: when Redis reaches its memory limit it "
            f"can evict keys, and with them queued, scheduled and retrying jobs. Set "
            f"maxmemory-policy to {NO_EVICTION}.")


# -- entries and tokens ----------------------------------------------------------------


def _shown(found: object) -> str | None:
    """A stored value as text to show (None if there is none)."""
    return str(found) if found is not None else None


def digest(raw: bytes) -> str:
    """The digest half of a token: names an entry's exact bytes."""
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest()[:TOKEN_DIGEST_LENGTH]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    """One stored job as an admin sees it: the exact bytes and what they say."""

    raw: bytes
    payload: dict[str, Any] | None
    """The decoded JSON object, or None if the bytes are not one."""
    score: float | None = None
    """Its score in a set: when it is due (schedule, retry) or died (dead)."""
    position: int | None = None
    """Its place in a queue: 0 runs next."""
    home: str | None = None
    """The queue whose list or set holds it: where an action on it goes (each queue has
    its own schedule, retry and dead sets). Its ``queue`` field says the same for any
    job a worker or client wrote."""

    @property
    def token(self) -> str:
        """Names this entry for an action: where it was seen, and a digest of its bytes."""
        where = repr(self.score) if self.score is not None else str(self.position)
        return f"{where}:{digest(self.raw)}"

    @property
    def _fields(self) -> Mapping[str, Any]:
        return self.payload if self.payload is not None else _NO_FIELDS

    @property
    def jid(self) -> str | None:
        return wire.jid(self._fields)

    @property
    def name(self) -> str:
        """The job's registered name; ``"?"`` for an entry that is not a job."""
        name = wire.name(self._fields)
        return name if name is not None else "?"

    @property
    def queue(self) -> str | None:
        return wire.text(self._fields, "queue")

    @property
    def args(self) -> list[Any]:
        return wire.args_of(self._fields)

    @property
    def kwargs(self) -> dict[str, Any]:
        return wire.kwargs_of(self._fields)

    @property
    def error_class(self) -> str | None:
        return _shown(wire.value(self._fields, "error_class"))

    @property
    def error_message(self) -> str | None:
        return _shown(wire.value(self._fields, "error_message"))

    @property
    def backtrace(self) -> list[str]:
        lines = wire.value(self._fields, "error_backtrace")
        return [str(line) for line in lines] if isinstance(lines, list) else []

    @property
    def retry_count(self) -> int | None:
        return wire.count(self._fields, "retry_count")

    @property
    def batch_id(self) -> str | None:
        """The batch it is a member of, or (a callback) was enqueued for."""
        return wire.text(self._fields, "bid")

    @property
    def batch_callback(self) -> str | None:
        """Which of its batch's callbacks it is (death, complete, success), if one."""
        return wire.text(self._fields, "batch_callback")

    def stamp(self, name: wire.Field) -> float | None:
        """A time field (``enqueued_at``, ``created_at``, ``failed_at``) as epoch s."""
        return wire.number(self._fields, name)

    @property
    def runnable(self) -> bool:
        """Can it be put back on a queue? (an unparseable entry cannot: it would fail
        the same way; its bytes stay in dead for a person to look at). Nor can one
        holding NaN or Infinity, which Python's JSON reads but a job may not carry: it
        could not be encoded again to be pushed."""
        try:
            wire.encode(wire.decode(self.raw, wire.NO_SIZE_LIMIT), wire.NO_SIZE_LIMIT)
        except Exception:
            return False
        return True

    def display_args(self, limit: int = 200) -> str:
        """Arguments as one line of JSON, cut at ``limit`` characters."""
        if self.payload is None:
            text = self.raw[:limit * 4].decode("utf-8", "replace")
        elif wire.value(self._fields, "raw_payload_preview") is not None:
            text = str(wire.value(self._fields, "raw_payload_preview"))
        else:
            parts = [json.dumps(arg, ensure_ascii=False) for arg in self.args]
            parts += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in self.kwargs.items()]
            text = ", ".join(parts)
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready description (for ``--json``)."""
        described: dict[str, Any] = {
            "token": self.token, "jid": self.jid, "class": self.name, "queue": self.queue,
            "args": self.args, "kwargs": self.kwargs, "score": self.score,
            "position": self.position, "retry_count": self.retry_count,
            "error_class": self.error_class, "error_message": self.error_message,
            "enqueued_at": self.stamp("enqueued_at"), "failed_at": self.stamp("failed_at"),
        }
        if self.payload is None:
            described["raw_base64"] = base64.b64encode(self.raw).decode("ascii")
        return described

    @classmethod
    def read(cls, raw: bytes, *, score: float | None = None, position: int | None = None,
             home: str | None = None) -> JobRecord:
        # As the worker reads it (wire.decode): UTF-8 JSON, any depth the parser takes.
        value = stored.json_value(raw, max_depth=None)
        return cls(raw=raw, payload=value if isinstance(value, dict) else None,
                   score=score, position=position, home=home)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    number: int
    size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))


@dataclass(frozen=True, slots=True)
class Found:
    """What a search found: at most ``limit`` matches, and whether it looked at all."""

    items: list[JobRecord]
    complete: bool
    """False if the search stopped early (enough matches, or its budget spent)."""


@dataclass(frozen=True, slots=True)
class Done:
    """What an admin action did: entries acted on, and entries that were gone or could
    not be acted on (with why)."""

    done: int = 0
    missing: int = 0
    refused: list[str] = field(default_factory=list)


def page_bounds(number: int, size: int) -> tuple[int, int, int]:
    """Page ``number`` (from 1) of ``size`` entries: its first and last index, and size."""
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"page numbers start at 1, got {number!r}")
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_PAGE_SIZE:
        raise ValueError(f"page size must be 1..{MAX_PAGE_SIZE}, got {size!r}")
    start = (number - 1) * size
    return start, start + size - 1, size


def split_token(token: str) -> tuple[str, str]:
    """A token's two halves: where the entry was seen, and the digest of its bytes."""
    where, sep, hashed = str(token).rpartition(":")
    if not sep or len(hashed) != TOKEN_DIGEST_LENGTH or not where:
        raise ValueError(f"not an entry token: {token!r}")
    return where, hashed


def glob_pattern(term: str) -> str:
    """A ZSCAN MATCH pattern finding ``term`` anywhere, ignoring ASCII case."""
    out = []
    for char in term:
        if char.isascii() and char.isalpha():
            out.append(f"[{char.lower()}{char.upper()}]")
        elif char in "*?[]\\^-":
            out.append("\\" + char)
        else:
            out.append(char)
    return "*" + "".join(out) + "*"


# -- what the views read ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DayTotals:
    day: str
    """``YYYY-MM-DD``, UTC."""
    processed: int
    failed: int


@dataclass(frozen=True, slots=True)
class Totals:
    processed: int
    failed: int
    at: float


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    size: int
    latency: float
    """Seconds the oldest job has waited (0 for an empty queue)."""
    paused_since: float | None = None
    """When the queue was paused (epoch s; 0.0 if its flag is unreadable); None: not
    paused."""
    waiting_for_parents: int = 0
    """Jobs of the queue waiting for their parents (``options(after=[...])``): not on
    its list yet, so not in ``size`` (``admin/waiting.py``)."""
    by_priority: Mapping[int, int] = field(default_factory=dict)
    """Jobs waiting on the queue outside its groups, per priority, for the priorities
    that have some (``options(priority=N)``); a queue of plain jobs: ``{0: size}``."""
    by_group: Mapping[str, int] = field(default_factory=dict)
    """Jobs waiting per fair group (``options(group=...)``), for the groups that have
    some, in turn order (``size`` counts them too)."""
    due: int = 0
    """Scheduled and retry jobs of the queue due now: a worker moves them onto it at
    its next poll (and none will while no worker runs)."""
    running: int = 0
    """Jobs of the queue on the in-progress lists of the processes serving it."""
    demand: int = 0
    """``size + due + running``: the work the queue has now, what an autoscaler scales
    on (``cogworker_queue_demand``); jobs waiting for their parents are not in it."""
    unserved: bool = False
    """It holds jobs to run (queued, or due) and no live process serves it: they wait
    until a worker for it starts (``admin/serving.py``)."""

    @property
    def paused(self) -> bool:
        return self.paused_since is not None

    @property
    def state(self) -> str:
        """``"paused"``, ``"unserved"`` or ``"running"``: the word the dashboard,
        ``stats`` and ``queues`` all show (one place, so that they never disagree). A
        paused queue says paused, served or not: the pause is what the user chose."""
        if self.paused:
            return "paused"
        return "unserved" if self.unserved else "running"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningJob:
    jid: str
    name: str
    queue: str | None
    started_at: float | None
    runtime: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessInfo:
    """A worker process as its beats describe it."""

    identity: str
    alive: bool
    hostname: str | None
    pid: int | None
    started_at: float | None
    last_beat: float | None
    beat_age: float | None
    """Seconds since its last beat, by Redis' clock."""
    lag_ms: float | None
    concurrency: int | None
    busy: int
    queues: list[str]
    rss_bytes: int | None
    version: str | None
    in_progress: int
    """Jobs on its in-progress list (fetched, not settled)."""
    running: list[RunningJob]
    supervisor: str | None = None
    """The ``run --processes`` supervisor (``host:pid``) that started it, if any."""

    @property
    def awaiting_recovery(self) -> bool:
        """Stopped beating with jobs still on its list: recovery will requeue them."""
        return not self.alive and self.in_progress > 0

    def as_dict(self) -> dict[str, Any]:
        described = {name: getattr(self, name) for name in self.__dataclass_fields__}
        described["running"] = [vars_of(r) for r in self.running]
        described["awaiting_recovery"] = self.awaiting_recovery
        return described


def vars_of(value: Any) -> dict[str, Any]:
    """A record's fields as a dict (for ``--json`` and the dashboard's JSON)."""
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


def _text(value: Any) -> str | None:
    """A string a beat should hold, or None (a beat is shown whatever it holds)."""
    return value if isinstance(value, str) else None


def process_info(entry: dict[str, Any], now: float) -> ProcessInfo:
    """What ``Admin.processes`` read of one identity, as a view shows it (``now`` by
    Redis' clock)."""
    info = entry["info"] or {}
    last = entry["last_beat"]
    running = []
    for jid, what in sorted(entry["running"].items()):
        started = finite_number(what.get("run_at"))
        running.append(RunningJob(
            jid=jid, name=str(what.get("class", "?")), queue=_text(what.get("queue")),
            started_at=started, runtime=max(0.0, now - started) if started else None))
    pid, concurrency = finite_number(info.get("pid")), finite_number(info.get("concurrency"))
    rss = finite_number(info.get("rss_bytes"))
    queues = info.get("queues")
    return ProcessInfo(
        identity=entry["identity"], alive=entry["alive"],
        hostname=_text(info.get("hostname")), pid=int(pid) if pid is not None else None,
        started_at=finite_number(info.get("started_at")), last_beat=last,
        beat_age=max(0.0, now - last) if last is not None else None,
        lag_ms=finite_number(info.get("lag_ms")),
        concurrency=int(concurrency) if concurrency is not None else None,
        busy=len(running) if not entry["alive"] else int(finite_number(info.get("busy")) or 0),
        queues=[str(q) for q in queues] if isinstance(queues, list) else [],
        rss_bytes=int(rss) if rss is not None else None,
        version=str(info["version"]) if "version" in info else None,
        in_progress=entry["in_progress"], running=running,
        supervisor=_text(info.get("supervisor")),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PeriodicInfo:
    """A periodic job: its schedule, queue, next run (epoch s), last claimed tick, and
    whether a run holds its lock now."""

    name: str
    schedule: str
    tz: str
    queue: str
    next_run: float
    last_run: float | None
    running: bool

