"""Batches in Redis: open, add, seal, and the relay of their members' ends.

A batch's keys are in the namespace's slot (its members span queues); a member's end is
written, by the member's own settle script, as a note in its queue's slot
(``_record.lua``), and relayed from there to its batch (``apply``, then ``drop_notes``:
destination first). Every script is in ``lua/batch_*.lua`` with its contract; the
states and the sets are in ``lua/_batch.lua``. The client side is
``workflows/batch.py``; the relay, ``worker/notes_relay.py`` (it carries dependency notes
too: ``Note.watchers``, ``redis/dependencies.py``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, cast

from cogworker_async.errors import WrongTypeKey
from cogworker_async.redis.errors import NoPermissionError, ResponseError
from cogworker_async.redis.part import Part, as_bytes, wrong_type

OPEN_TTL: Final = 30 * 86400.0
"""Seconds an open batch's keys live without a member added: the last bound of a batch
nobody seals (a block's hold is let go of well before: ``batch.HOLD``, the reaper)."""
DONE_TTL: Final = 7 * 86400.0
"""Seconds an ended batch is kept, for its status."""
NOTES_PER_READ: Final = 200
"""Notes the relay reads from a queue's notes list per round."""
CLOCK_MARGIN: Final = 60.0
"""Seconds the firing set is read past this process's clock: its scores are the clocks
of the processes that decided (another host's may run ahead); a batch put off is put
past it (``later``)."""
MEMBER_SCAN_ROUNDS: Final = 10
"""SSCAN calls ``sample`` makes at most for one set (each asks for the jids still
wanted): a set of a million members costs a few bounded reads, never an SMEMBERS."""

BatchIndex = Literal["all", "open"]
"""The two lists of batches: every batch kept (``Keys.batches``), and those not ended
(``Keys.batches_open``); each newest first."""


@dataclass(frozen=True, slots=True)
class Note:
    """One member's end, as its settle script wrote it."""

    raw: bytes
    bid: str
    """"" for a job in no batch (a parent others wait for)."""
    jid: str
    end: str
    watchers: str = ""
    """The jobs waiting for it (``dependencies.parse_watchers``), as its record named them."""


def parse_note(raw: bytes) -> Note | None:
    """A note's parts; None for one that is not a note (it is dropped, unapplied)."""
    parts = raw.decode("utf-8", "replace").split("\t")
    if len(parts) not in (3, 4) or parts[2] not in ("succeeded", "dead", "cancelled"):
        return None
    return Note(raw, parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else "")


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A batch as Redis holds it."""

    bid: str
    fields: dict[str, str]
    pending: int
    succeeded: int
    dead: int
    cancelled: int
    children: list[str]


class BatchEnded(Exception):
    """The batch cannot take members any more (it ended), or is not open."""


class HoldLapsed(BatchEnded):
    """A batch block outside a worker was not heard of (no open, no add) for longer than
    its ``hold``: the relay let go of it as of a dead block's (its batch abandoned, or
    sealed if it reopened it). Raised at that block's next add or exit: the block is
    alive after all, and its members must not join silently."""


_FOREIGN: Final = re.compile(r"WRONGTYPE (.+?) (\S+) is not a (\w+) \(not written by cogworker")
"""How a batch script refuses a key of another type (``_batch.lua``'s batch_foreign)."""


def foreign(exc: Exception, doing: str) -> WrongTypeKey | None:
    """The project's error for a batch script's refusal of a key of another type (a
    co-tenant's), naming the key; None for any other error."""
    refused = _FOREIGN.search(str(exc)) if isinstance(exc, ResponseError) else None
    if refused is None:
        return None
    what, key, kind = refused.groups()
    return WrongTypeKey(f"cannot {doing}: the {what} {key} is not a {kind}: not a key of "
                        "cogworker's (a co-tenant's, or damaged): nothing was written; "
                        "delete the key, then try again", key)


def _ended(exc: ResponseError) -> BatchEnded | None:
    """The batch error a script's refusal means, if it is one."""
    text = str(exc)
    if text.startswith("LAPSED"):
        return HoldLapsed(text)
    if text.startswith(("ENDED", "NOPARENT", "NOBATCH", "SEALED")):
        return BatchEnded(text)
    return None


class BatchDamaged(Exception):
    """A batch's keys are not what the batch scripts write (a key of another type, a
    field that is not a number, callbacks that are not JSON): written by hand, or by
    another program in the namespace. Readers show it as damaged; the relay skips it."""


class BatchesPart(Part):
    def _now(self) -> float:
        return time.time()

    async def open(self, bid: str, *, description: str = "", callbacks: str = "{}",
                   parent: str | None = None, now: float | None = None, token: str = "",
                   reopen: bool = False) -> str:
        """Open ``bid`` (or open it again, ``reopen``: it must exist), held open by the
        block of ``token`` until that block's ``seal``; "opened" or "reopened".
        ``WrongTypeKey``: a key it writes (or the firing set) holds another type;
        nothing was written."""
        keys = [*self.keys.batch_keys(bid), self.keys.batches, self.keys.batches_open,
                self.keys.batches_held, self.keys.batches_firing,
                *(self.keys.batch_keys(parent) if parent else [])]
        try:
            done = await self.scripts.run("batch_open", keys, [
                bid, now if now is not None else self._now(), description, callbacks,
                parent or "", int(OPEN_TTL), token or "-", "reopen" if reopen else "new"])
        except ResponseError as exc:
            if (ended := _ended(exc)) is not None:
                raise ended from exc
            if (refused := foreign(exc, f"open batch {bid}")) is not None:
                raise refused from None
            raise
        return as_bytes(done).decode()

    async def add(self, bid: str, jids: Sequence[str], token: str = "",
                  renew: Sequence[tuple[str, str]] = ()) -> list[str]:
        """``jids`` join open batch ``bid`` (before they are enqueued), added by the block
        of ``token`` (its lease renewed, and those of ``renew``'s (bid, token): the
        blocks enclosing it); those that joined (not the ones already members).
        ``HoldLapsed``: that block's lease lapsed."""
        joined = await self._members(bid, "join", jids, token, renew)
        return [as_bytes(jid).decode() for jid in joined] if isinstance(joined, list) else []

    async def leave(self, bid: str, jids: Sequence[str], token: str = "") -> int:
        """``jids``, never pushed, leave open batch ``bid``; how many left."""
        left = await self._members(bid, "leave", jids, token)
        return left if isinstance(left, int) else 0

    async def _members(self, bid: str, how: str, jids: Sequence[str], token: str,
                       renew: Sequence[tuple[str, str]] = ()) -> object:
        try:
            reply: object = await self.scripts.run(
                "batch_add", [*self.keys.batch_keys(bid),
                              *(self.keys.batch(around) for around, _ in renew)],
                [int(OPEN_TTL), how, " ".join([token or "-", *(t for _, t in renew)]),
                 self._now(), *jids])
        except ResponseError as exc:
            if (ended := _ended(exc)) is not None:
                raise ended from exc
            raise
        return reply

    async def seal(self, bid: str, now: float | None = None, token: str = "") -> str | None:
        """The block of ``token`` lets go of ``bid``: sealed once none holds it; its
        state (None: no such batch). ``HoldLapsed``: that block's lease lapsed (the
        relay let go of it already)."""
        try:
            state = await self.scripts.run(
                "batch_seal", [*self.keys.batch_keys(bid), self.keys.batches_firing,
                               self.keys.batches_open, self.keys.batches_held],
                [bid, now if now is not None else self._now(), int(DONE_TTL), token or "-"])
        except ResponseError as exc:
            if (ended := _ended(exc)) is not None:
                raise ended from exc
            raise
        return as_bytes(state).decode() if state else None

    async def abandon(self, bid: str, parent: str | None, now: float | None = None,
                      token: str = "") -> str | None:
        """The block of ``token`` raised: ``bid`` ends abandoned (no callback), unless
        another block holds it; its state (None: no such batch)."""
        keys = [*self.keys.batch_keys(bid), self.keys.batches_firing, self.keys.batches_open,
                self.keys.batches_held, *(self.keys.batch_keys(parent) if parent else [])]
        state = await self.scripts.run("batch_abandon", keys, [
            bid, now if now is not None else self._now(), int(DONE_TTL), token or "-",
            parent or ""])
        return as_bytes(state).decode() if state else None

    async def release(self, bid: str, tokens: Sequence[str] | None, parent: str | None,
                      now: float | None = None) -> str | None:
        """Let go of the blocks of ``tokens`` that hold ``bid`` open (None: of every
        block, ``cancel_batch``); once none holds it, it is sealed — or abandoned, when
        the block that opened it is one let go of (its process died inside it). Its
        state (None: no such batch)."""
        keys = [*self.keys.batch_keys(bid), self.keys.batches_firing, self.keys.batches_open,
                self.keys.batches_held, *(self.keys.batch_keys(parent) if parent else [])]
        state = await self.scripts.run("batch_release", keys, [
            bid, now if now is not None else self._now(), int(DONE_TTL), parent or "",
            "all" if tokens is None else "some", *(tokens or [])])
        return as_bytes(state).decode() if state else None

    async def marked(self, bid: str) -> tuple[str | None, str, str]:
        """What the relay's repair reads of ``bid``: its state (None: no such batch), its
        holders and its ``orphans`` mark ("": none; batch_release.lua)."""
        got = await self.client.hmget(self.keys.batch(bid), ["state", "holders", "orphans"])
        state, holders, mark = (as_bytes(v).decode("utf-8", "replace") if v else "" for v in got)
        return state or None, holders, mark

    async def repair(self, bid: str, mark: str, state: str, never_pushed: Sequence[str],
                     now: float | None = None) -> str | None:
        """The relay's repair of ``bid`` as it read it (``mark``, ``state``): the jids of
        ``never_pushed`` count cancelled, the mark goes and the batch leaves the held
        index — unless a block holds it again or it changed since ("retry": nothing
        written). Its state (None: no such batch)."""
        state_now = await self.scripts.run(
            "batch_repair", [*self.keys.batch_keys(bid), self.keys.batches_firing,
                             self.keys.batches_open, self.keys.batches_held],
            [bid, now if now is not None else self._now(), int(DONE_TTL), mark, state,
             *never_pushed])
        return as_bytes(state_now).decode() if state_now else None

    async def held_page(self, start: int, count: int) -> list[tuple[str, str, str | None]]:
        """Batches held open by a block of a worker process, or by one on a lease (outside
        a worker), oldest first, from
        ``start``: (bid, its holder tokens, its parent); a hash that cannot be read
        shows no holder."""
        found = [as_bytes(cast("bytes | str", bid)).decode("utf-8", "replace") for bid in
                 await self.client.zrange(self.keys.batches_held, start, start + count - 1)]
        if not found:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for bid in found:
                pipe.hmget(self.keys.batch(bid), ["holders", "parent"])
            replies = await pipe.execute(raise_on_error=False)
        held: list[tuple[str, str, str | None]] = []
        for bid, reply in zip(found, replies, strict=True):
            if isinstance(reply, NoPermissionError):
                raise reply
            holders, parent = (None, None) if isinstance(reply, Exception) else reply
            held.append((bid, as_bytes(holders).decode("utf-8", "replace") if holders else "",
                         as_bytes(parent).decode("utf-8", "replace") if parent else None))
        return held

    async def leases(self, bids: Sequence[str]) -> dict[str, dict[str, float]]:
        """The lease deadlines (epoch s, Redis' clock) of the blocks outside a worker that
        hold ``bids``: bid -> token -> deadline. A hash that cannot be read, or a
        deadline that is not a number, shows none (the release script judges again)."""
        if not bids:
            return {}
        async with self.client.pipeline(transaction=False) as pipe:
            for bid in bids:
                pipe.hget(self.keys.batch(bid), "leases")
            replies = await pipe.execute(raise_on_error=False)
        found: dict[str, dict[str, float]] = {}
        for bid, reply in zip(bids, replies, strict=True):
            if isinstance(reply, NoPermissionError):
                raise reply
            found[bid] = {}
            if reply and not isinstance(reply, Exception):
                for entry in as_bytes(reply).decode("utf-8", "replace").split():
                    token, _, deadline = entry.partition("=")
                    try:
                        found[bid][token] = float(deadline)
                    except ValueError:
                        continue
        return found

    async def gone(self, identities: Sequence[str]) -> set[str]:
        """Of ``identities``, the processes that are gone: no alive marker, and no
        last beat any more (recovery forgot it once its jobs were back; a clean stop)."""
        wanted = list(dict.fromkeys(identities))
        if not wanted:
            return set()
        async with self.client.pipeline(transaction=False) as pipe:
            for identity in wanted:
                pipe.pttl(self.keys.process(identity))  # alive: with a beat's TTL
                pipe.hexists(self.keys.last_beat, identity)
            replies = await pipe.execute()
        return {identity for i, identity in enumerate(wanted)
                if int(replies[2 * i]) <= 0 and not replies[2 * i + 1]}

    async def apply(self, bid: str, ends: Sequence[tuple[str, str]],
                    now: float | None = None) -> str | None:
        """Members' ``(jid, end)`` applied to ``bid``; its state (None: no such batch).
        ``WrongTypeKey``: the firing set or the open index holds another type (nothing
        written; not this batch's keys: its notes are to be kept)."""
        args: list[object] = [bid, now if now is not None else self._now(), int(DONE_TTL),
                              int(OPEN_TTL)]
        for jid, end in ends:
            args += [jid, end]
        try:
            state = await self.scripts.run(
                "batch_apply", [*self.keys.batch_keys(bid), self.keys.batches_firing,
                                self.keys.batches_open], args)
        except ResponseError as exc:
            if (refused := foreign(exc, f"apply its members' ends to batch {bid}")) is not None:
                raise refused from None
            raise
        return as_bytes(state).decode() if state else None

    async def fired(self, bid: str, kinds: Sequence[str], parent: str | None,
                    now: float | None = None) -> str | None:
        """The callbacks of ``kinds`` are enqueued; the batch's state (None: gone)."""
        keys = [*self.keys.batch_keys(bid), self.keys.batches_firing, self.keys.batches_open,
                *(self.keys.batch_keys(parent) if parent else [])]
        state = await self.scripts.run("batch_fired", keys, [
            bid, now if now is not None else self._now(), int(DONE_TTL), " ".join(kinds),
            parent or ""])
        return as_bytes(state).decode() if state else None

    async def open_count(self) -> int:
        """How many batches have not ended (abandoned ones count until trimmed)."""
        return int(await self.client.zcard(self.keys.batches_open))

    async def notes(self, queue: str, count: int = NOTES_PER_READ) -> list[bytes]:
        """The oldest notes in ``queue``'s notes list (``Keys.batch_notes``), as written."""
        return [as_bytes(raw) for raw in
                await self.client.lrange(self.keys.batch_notes(queue), 0, count - 1)]

    async def drop_notes(self, queue: str, notes: Sequence[bytes]) -> int:
        if not notes:
            return 0
        return int(await self.scripts.run("drop_notes", [self.keys.batch_notes(queue)],
                                          list(notes)))

    async def firing(self, count: int = NOTES_PER_READ, now: float | None = None) -> list[str]:
        """Batches with callbacks to enqueue or an end to tell their parent, due by
        ``now`` (one that failed is put off: ``later``), oldest first. ``WrongTypeKey``:
        the firing set holds another type (a co-tenant's key): no callback can fire."""
        key = self.keys.batches_firing
        try:
            found = await self.client.zrangebyscore(
                key, "-inf", (now if now is not None else self._now()) + CLOCK_MARGIN,
                start=0, num=count)
        except ResponseError as exc:
            if not wrong_type(exc):
                raise
            raise WrongTypeKey(f"cannot fire any batch's callbacks: the firing set {key} is "
                               "not a zset: not a key of cogworker's (a co-tenant's, or "
                               "damaged): delete it", key) from None
        return [as_bytes(cast("bytes | str", bid)).decode("utf-8", "replace") for bid in found]

    async def later(self, bid: str, delay: float) -> None:
        """Put off ``bid``'s firing by ``delay`` seconds (it failed: its keys damaged,
        or its callback's node away), behind the others; nothing if it left the set."""
        await self.client.zadd(self.keys.batches_firing,
                               {bid: self._now() + CLOCK_MARGIN + delay}, xx=True)

    async def read(self, bid: str) -> BatchRecord | None:
        """Batch ``bid`` as held (None: unknown, or expired)."""
        keys = self.keys
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.batch(bid))
            for which in ("pending", "succeeded", "dead", "cancelled"):
                pipe.scard(keys.batch_set(bid, which))
            pipe.smembers(keys.batch_set(bid, "kids"))
            got = await pipe.execute(raise_on_error=False)
        for reply in got:
            if isinstance(reply, Exception):
                if not wrong_type(reply):
                    raise reply
                raise BatchDamaged(f"batch {bid}: a key of another type than the batch "
                                   f"scripts write ({reply})")
        if not got[0]:
            return None
        fields = {as_bytes(k).decode("utf-8", "replace"): as_bytes(v).decode("utf-8", "replace")
                  for k, v in got[0].items()}
        return BatchRecord(bid, fields, int(got[1]), int(got[2]), int(got[3]), int(got[4]),
                           sorted(as_bytes(kid).decode("utf-8", "replace") for kid in got[5]))

    async def members(self, bid: str, which: str) -> list[str]:
        """Every jid of one of ``bid``'s sets, sorted: read by SSCAN pages, so that a set
        of a million members never blocks Redis with one reply."""
        found = [as_bytes(jid).decode() async for jid in
                 self.client.sscan_iter(self.keys.batch_set(bid, which), count=1000)]
        return sorted(set(found))

    # -- the admin model's reads (the dashboard's Batches tab): bounded, whatever the size

    async def page(self, index: BatchIndex, start: int, count: int
                   ) -> tuple[int, list[tuple[str, float]]]:
        """How many batches ``index`` lists, and its entries ``start``.. (at most
        ``count``), newest first: (bid, created_at). A key of another type reads as an
        empty list (a refusal, NOPERM, is raised: the page's 503)."""
        key = self.keys.batches if index == "all" else self.keys.batches_open
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.zcard(key)
            pipe.zrevrange(key, start, start + count - 1, withscores=True)
            total, entries = await pipe.execute(raise_on_error=False)
        for reply in (total, entries):
            if isinstance(reply, Exception):
                if isinstance(reply, NoPermissionError) or not isinstance(reply, ResponseError):
                    raise reply
                return 0, []
        return int(total), [(as_bytes(bid).decode("utf-8", "replace"), float(score))
                            for bid, score in entries]

    async def sample(self, bid: str, which: str, limit: int) -> list[str]:
        """Up to ``limit`` member jids of one of ``bid``'s sets (pending, succeeded, dead,
        cancelled), sorted: SSCAN steps, at most ``MEMBER_SCAN_ROUNDS`` of them (a set
        has no order: which ``limit`` of a larger set are shown is Redis' choice). A
        key of another type reads as empty."""
        key, found, cursor = self.keys.batch_set(bid, which), set[str](), 0
        for _ in range(MEMBER_SCAN_ROUNDS):
            try:
                cursor, jids = await self.client.sscan(key, cursor, count=limit - len(found))
            except ResponseError as exc:
                if isinstance(exc, NoPermissionError):
                    raise
                return []
            found.update(as_bytes(jid).decode("utf-8", "replace") for jid in jids)
            if int(cursor) == 0 or len(found) >= limit:
                break
        return sorted(found)[:limit]
