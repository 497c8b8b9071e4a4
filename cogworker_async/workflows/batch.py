"""Batches from the caller's side: ``async with jobs.batches.open(...) as batch:``.

Every job enqueued inside the block, by any enqueue path, joins the batch: its jid is
added to the batch's pending set *before* the job is pushed (``context.BATCH``, read by
the client), so a member that ends at once is already counted. Leaving the block seals
the batch: from then on its callbacks can fire, never before (a member ending before its
siblings are added cannot end the batch early). An exception inside the block seals
nothing and cancels the members already enqueued. A batch not ended can be opened again
(``jobs.batches.open(bid=...)``) to add members. Opened inside a job that is a member of
a batch (or with ``parent=``), a batch is that batch's child: the parent ends only after it.
A block in a process that is not a worker holds its batch on a lease (``hold``, renewed
by its open and each member it adds): killed inside it, it is let go of once the lease
lapses (``worker/batch_reaper.py``); alive, it hears so (``HoldLapsed``).

Where its members' ends are counted and how its callbacks fire exactly once:
``redis/lua/_batch.lua``, ``worker/notes_relay.py``, and docs/design.md.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Literal, Protocol

import anyio

from cogworker_async.jobs import context, signature
from cogworker_async.jobs.signature import Signature
from cogworker_async.jobs.status import CancelOutcome, JobStatus, check_jid
from cogworker_async.redis.batches import OPEN_TTL, BatchDamaged, BatchRecord, HoldLapsed
from cogworker_async.settings import Settings


class BatchBackend(Protocol):
    """Where batches are kept: ``redis/batches.py``, or the testing fake's."""

    async def open(self, bid: str, *, description: str = "", callbacks: str = "{}",
                   parent: str | None = None, now: float | None = None, token: str = "",
                   reopen: bool = False) -> str: ...

    async def add(self, bid: str, jids: Sequence[str], token: str = "",
                  renew: Sequence[tuple[str, str]] = ()) -> list[str]: ...

    async def leave(self, bid: str, jids: Sequence[str], token: str = "") -> int: ...

    async def seal(self, bid: str, now: float | None = None, token: str = "") -> str | None: ...

    async def abandon(self, bid: str, parent: str | None, now: float | None = None,
                      token: str = "") -> str | None: ...

    async def read(self, bid: str) -> BatchRecord | None: ...

    async def release(self, bid: str, tokens: Sequence[str] | None, parent: str | None,
                      now: float | None = None) -> str | None: ...

    async def apply(self, bid: str, ends: Sequence[tuple[str, str]],
                    now: float | None = None) -> str | None: ...

    async def members(self, bid: str, which: str) -> list[str]: ...


class BatchHost(Protocol):
    """What a batch needs of its App (``app.App``; named apart from it: this is only
    the part a batch calls)."""

    settings: Settings

    def redis_url(self) -> str: ...

    def _batch_backend(self) -> BatchBackend: ...

    async def cancel(self, jid: str, *, queue: str | None = None) -> CancelOutcome: ...

    async def status(self, jid: str, *, queue: str | None = None) -> JobStatus: ...

BatchState = Literal["open", "running", "success", "complete", "dead", "abandoned",
                     "unknown", "damaged"]
KINDS: Final = {"on_death": "death", "on_complete": "complete", "on_success": "success"}
MAX_BID_CHARS: Final = 64
"""A callback's jid is ``<bid>-<kind>``: within a jid's length."""
MAX_DESCRIPTION: Final = 1000

OWNER: Final[ContextVar[tuple[str, str, str] | None]] = ContextVar("cogworker_batch_owner",
                                                                   default=None)
"""(Redis URL, namespace, identity) of the worker process running this code (the worker
sets it for its jobs, ``worker/manager.py``): a block's holder token names the process,
so that a block whose process dies inside it is let go once that process is gone
(``worker/batch_reaper.py``), never holding its batch — and the batch's parent — open
for good. Only for a batch where that process beats (its App's URL and namespace): in
another App's, nobody knows the process, and the block holds on a lease."""
HOLD: Final = 600.0
"""Seconds a batch block in a process that is not a worker holds its batch without an
open or an add (``jobs.batches.open(..., hold=)``): killed inside its block, its batch (and
the batch's parent) is let go of that long after its last add and a relay pass; alive but
silent longer, it is let go of all the same and told at its next add or its exit
(``HoldLapsed``). A worker's blocks are judged by their process instead (``OWNER``)."""
MAX_AROUND: Final = 16
"""Enclosing blocks whose leases an add renews (the nearest; deeper nesting is rare)."""
LIVE_HOLDERS: Final[set[str]] = set()
"""The tokens of this process's blocks not exited yet: the relay of a process lets go
of a token naming its own identity that is not here (an earlier process of the same
identity died inside its block, or a seal failed)."""


@dataclass(frozen=True, slots=True)
class BatchStatus:
    """What ``jobs.batches.status(bid)`` says of a batch."""

    bid: str
    state: BatchState
    """open (a block holds it open: its own, or one that reopened it), running, then for
    good: success (every member succeeded), complete (every member ended, some
    cancelled, none dead), dead (a member died) or abandoned (its block raised: its
    members cancelled, no callback); unknown: no such batch, or it ended longer ago than
    it is kept; damaged: its keys are not what the batch scripts write (``problem``
    says how)."""
    description: str | None = None
    total: int = 0
    pending: int = 0
    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0
    parent: str | None = None
    children: list[str] = field(default_factory=list)
    callbacks: dict[str, str] = field(default_factory=dict)
    """Each callback due or enqueued so far: kind (death, complete, success) -> its jid
    (``jobs.status(jid)`` says how it went)."""
    created_at: float | None = None
    finished_at: float | None = None
    problem: str | None = None
    """Why a damaged batch cannot be read."""


def new_bid() -> str:
    return secrets.token_hex(12)


class Batch:
    """A batch: ``async with`` it to add members; ``bid`` is its id."""

    def __init__(self, app: BatchHost, *, description: str | None = None,
                 on_success: Signature | None = None, on_complete: Signature | None = None,
                 on_death: Signature | None = None, bid: str | None = None,
                 parent: str | None = None, hold: float | None = None) -> None:
        if description is not None and (not isinstance(description, str)
                                        or len(description) > MAX_DESCRIPTION):
            raise TypeError(f"description must be a str of at most {MAX_DESCRIPTION} "
                            f"characters, not {description!r:.80}")
        self._app = app
        self.description = description
        self.callbacks = {kind: checked for name, kind in KINDS.items()
                          if (checked := signature.check(
                              {"on_success": on_success, "on_complete": on_complete,
                               "on_death": on_death}[name], name)) is not None}
        self._reopen = bid is not None
        self.bid = check_jid(bid) if bid is not None else new_bid()
        if len(self.bid) > MAX_BID_CHARS:  # a callback's jid is the bid and its kind
            raise ValueError(f"a bid must be at most {MAX_BID_CHARS} characters")
        self.parent = check_jid(parent) if parent is not None else None
        self.hold = check_hold(hold)
        self._holder = ""
        """This block's token: it holds the batch open until this block exits
        (``holder_token``)."""
        self._joined: list[str] = []
        """The jids this block added (and pushed, or is pushing): what its failure cancels."""
        self._token: Token[context.OpenBatch | None] | None = None
        self._around: tuple[tuple[str, str], ...] = ()
        """(bid, token) of the blocks on a lease enclosing this one in its task, on this
        App's batches: busy adding to this one (their child), they are alive, and each
        add renews their leases too (``_leases_around``)."""

    async def __aenter__(self) -> Batch:
        parent = self.parent
        self._around = self._leases_around()
        if parent is None and not self._reopen:
            enclosing = context.BATCH.get()
            running = context.CURRENT.get(None)
            if enclosing is not None:  # a block inside another's: its child (Sidekiq's)
                parent = enclosing.bid
            # A member's job opens a child; a callback's batch has ended: no parent.
            elif running is not None and "batch_callback" not in running.payload:
                parent = running.batch_id
        self._holder = holder_token(self._reopen, self.hold, self._owner())
        LIVE_HOLDERS.add(self._holder)  # before the open: Redis never has it alone
        try:
            await self._app._batch_backend().open(
                self.bid, description=self.description or "",
                callbacks=json.dumps({kind: sig.stored() for kind, sig in self.callbacks.items()}),
                parent=parent, now=time.time(), token=self._holder, reopen=self._reopen)
        except BaseException:
            LIVE_HOLDERS.discard(self._holder)
            raise
        self.parent = parent
        self._token = context.BATCH.set(self)
        return self

    def _owner(self) -> str | None:
        """The worker process this block's hold names: None outside a worker, and for a
        batch of another App (another namespace or Redis) than the worker's."""
        owner = OWNER.get()
        if owner is None:
            return None
        url, namespace, identity = owner
        app = self._app
        return identity if (namespace, url) == (app.settings.namespace,
                                                app.redis_url()) else None

    def _leases_around(self) -> tuple[tuple[str, str], ...]:
        enclosing = context.BATCH.get()
        if not isinstance(enclosing, Batch) or enclosing._app is not self._app:
            return ()  # none, or another App's (another namespace's slot, or Redis)
        around = enclosing._around
        if "~" in enclosing._holder and enclosing.bid != self.bid:
            around = ((enclosing.bid, enclosing._holder), *around)
        return around[:MAX_AROUND]

    async def joining(self, jids: Sequence[str]) -> list[str]:
        joined = await self._app._batch_backend().add(self.bid, jids, token=self._holder,
                                                     renew=self._around)
        self._joined += joined
        return joined

    async def left(self, jids: Sequence[str]) -> None:
        """Jids that joined at a push refused as a duplicate: they leave (the client
        passes only those its own ``joining`` added, never a member already there)."""
        if jids:
            await self._app._batch_backend().leave(self.bid, jids, token=self._holder)
            self._joined = [jid for jid in self._joined if jid not in jids]

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._token is not None:
            context.BATCH.reset(self._token)
            self._token = None
        backend = self._app._batch_backend()
        # Shielded: a job's timeout or a cancel that ends the block must not leave the
        # batch held open (its parent would wait for it forever).
        with anyio.CancelScope(shield=True):
            try:
                if kind is None:
                    await backend.seal(self.bid, token=self._holder)
                    return
                for jid in self._joined:  # what this block added will not run
                    await self._app.cancel(jid)
                if self._reopen:  # a batch that existed: let go, its other members go on
                    try:
                        await backend.seal(self.bid, token=self._holder)
                    except HoldLapsed:  # let go of already: the block's own error says more
                        pass
                else:
                    await backend.abandon(self.bid, self.parent, token=self._holder)
            finally:  # a seal that failed: this process's relay lets go of the token
                LIVE_HOLDERS.discard(self._holder)


def check_hold(hold: object) -> float:
    """``hold``: None (``HOLD``) or seconds > 0, at most the bound of an open batch."""
    if hold is None:
        return HOLD
    if isinstance(hold, bool) or not isinstance(hold, int | float):
        raise TypeError(f"hold must be a number of seconds, not {type(hold).__name__}")
    if not (math.isfinite(hold) and 0 < hold <= OPEN_TTL):
        raise ValueError(f"hold must be seconds > 0 and <= {OPEN_TTL:.0f} (30 days), "
                         f"got {hold!r}")
    return float(hold)


def holder_token(reopen: bool, hold: float = HOLD, owner: str | None = None) -> str:
    """A block's token: whether the block opened the batch (n) or reopened it (r), and
    how the relay lets go of it if it never exits: in a worker process
    "<nonce>.<n|r>@<identity>" (once that process is gone), elsewhere
    "<nonce>.<n|r>~<ms>" (once its lease of ``hold`` lapses: renewed by each add).
    ``owner``: the worker process's identity (``Batch._owner``)."""
    nonce, kind = secrets.token_hex(8), "r" if reopen else "n"
    if not owner or any(c.isspace() for c in owner):
        return f"{nonce}.{kind}~{max(1, round(hold * 1000))}"
    return f"{nonce}.{kind}@{owner}"


async def status_of(app: BatchHost, bid: str) -> BatchStatus:
    """What ``bid`` has come to; "damaged" (never an exception) for a batch whose keys
    are not what the batch scripts write."""
    check_jid(bid)
    try:
        record = await app._batch_backend().read(bid)
        if record is None:
            return BatchStatus(bid, "unknown")
        return _status(bid, record)
    except BatchDamaged as exc:
        return BatchStatus(bid, "damaged", problem=str(exc))
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:  # its fields
        return BatchStatus(bid, "damaged", problem=f"batch {bid}: a field is not what the "
                                                   f"batch scripts write ({exc!r:.200})")


def _status(bid: str, record: BatchRecord) -> BatchStatus:
    f = record.fields
    # Decided (due or enqueued): a callback's jid is known from the moment it is due.
    fired = f.get("fired", "").split() + f.get("fire", "").split()
    callbacks = _callbacks(f.get("callbacks"))
    state = f.get("state", "unknown")
    if state == "running" and f.get("sealed") == "0":  # reopened: a block holds it open
        state = "open"
    return BatchStatus(
        bid, state if state in ("open", "running", "success", "complete", "dead",  # type: ignore[arg-type]
                                "abandoned") else "unknown",
        description=f.get("description") or None, total=int(f.get("total") or 0),
        pending=record.pending, succeeded=record.succeeded, dead=record.dead,
        cancelled=record.cancelled, parent=f.get("parent") or None, children=record.children,
        callbacks={kind: signature.callback_jid(bid, kind) for kind in fired
                   if kind in callbacks},
        created_at=float(f["created_at"]) if f.get("created_at") else None,
        finished_at=float(f["finished_at"]) if f.get("finished_at") else None)


def _callbacks(text: str | None) -> dict[str, object]:
    found = json.loads(text or "{}")
    if not isinstance(found, dict):
        raise TypeError(f"its callbacks are a {type(found).__name__}, not an object")
    return found


async def _record(backend: BatchBackend, bid: str) -> BatchRecord | None:
    try:
        return await backend.read(bid)
    except BatchDamaged:
        return None


async def cancel(app: BatchHost, bid: str) -> int:
    """Cancel every member of ``bid`` not ended, and of its child batches; how many. The
    batch ends whoever holds it open: every block's hold is let go of first (a block
    still running then adds no member: ``BatchEnded``), so it is sealed and ends once
    its members have. A pending jid with no job behind it (joined, then never pushed:
    its enqueuer died between the two) is counted cancelled in the batch, so the batch
    can end."""
    backend = app._batch_backend()
    record = await _record(backend, check_jid(bid))
    await backend.release(bid, None, record.fields.get("parent") or None if record else None)
    cancelled, never_pushed = 0, []
    for jid in await backend.members(check_jid(bid), "pending"):
        outcome = await app.cancel(jid)
        if outcome in ("cancelled", "stopping"):
            cancelled += 1
        elif outcome == "unknown":
            never_pushed.append((jid, "cancelled"))
    if never_pushed:
        await backend.apply(bid, never_pushed)
        cancelled += len(never_pushed)
    record = await _record(backend, bid)
    for child in record.children if record is not None else []:
        cancelled += await cancel(app, child)
    return cancelled


async def results(app: BatchHost, bid: str) -> dict[str, object]:
    """jid -> result of each member that succeeded and keeps its result."""
    found: dict[str, object] = {}
    for jid in await app._batch_backend().members(check_jid(bid), "succeeded"):
        status = await app.status(jid)
        if status.state == "succeeded" and status.result is not None:
            found[jid] = status.result
    return found
