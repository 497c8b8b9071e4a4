"""The Lua scripts and the one way they run.

Each move of a job between Redis structures is one script, ``lua/<name>.lua``; its
contract (KEYS, ARGV, reply, invariants) is the header of its file. The scripts are
found in that directory (a new move is a new file: nothing lists them), files whose
name starts with ``_`` are shared helpers put before each script that calls them (a
script runs alone in Redis and can import nothing).

``Scripts`` runs them for the async side — alone, in a batch on one connection, or
pipelined across slots — and ``SyncScript`` for the heartbeat's thread; both keep one
rule: EVALSHA, and where the node has not cached the script (NOSCRIPT: nothing ran) the
same call sent whole with EVAL, which caches it on the node that serves those keys
(SCRIPT LOAD could go to another: on a cluster each node has its cache, and a reshard or
failover brings a node that never saw it). Nothing outside this package runs Lua.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any, Final

import anyio
import redis
import redis.asyncio

from cogworker_async.errors import ConfigurationError
from cogworker_async.redis.cluster import ClusterClient, ClusterLane, redirect_of
from cogworker_async.redis.durability import Durability
from cogworker_async.redis.errors import NoScriptError, ResponseError
from cogworker_async.redis.lane import Lane

RERUNS: Final = 4
"""Tries of a batch's redirected call, alone (``Scripts.run_many``)."""
RERUN_PAUSE: Final = 0.1
"""Seconds before the second try; the next ones wait 2, 3 times as long."""


def _lua_files() -> list[str]:
    return sorted(entry.name[:-len(".lua")]
                  for entry in resources.files(__package__).joinpath("lua").iterdir()
                  if entry.name.endswith(".lua"))


SCRIPT_NAMES: Final = tuple(name for name in _lua_files() if not name.startswith("_"))
"""Every script, by file name."""


def file_text(name: str) -> str:
    """``lua/<name>.lua`` as written (without the helpers ``source`` adds)."""
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


_DEFINED: Final = re.compile(r"^local function (\w+)\(", re.MULTILINE)
_TOP_LOCAL: Final = re.compile(r"^local (?:function (\w+)\(|([\w, ]+?) =)")


@dataclass(frozen=True, slots=True)
class _Piece:
    """One top-level ``local`` of a helper file (with the comment above it): what it
    defines, the helper names it uses, and its text."""

    defines: frozenset[str]
    text: str


def _pieces(name: str) -> list[_Piece]:
    """``lua/<name>.lua`` cut at each top-level ``local`` (a function or a value)."""
    pieces: list[_Piece] = []
    chunk: list[str] = []
    for line in file_text(name).splitlines(keepends=True):
        if line.startswith("local ") and any(not part.startswith("--") for part in chunk):
            pieces.append(_piece(chunk))
            chunk = [part for part in chunk if False]
        if line.startswith("--") and chunk and not chunk[-1].startswith("--"):
            pieces.append(_piece(chunk))  # a comment after code opens the next piece
            chunk = []
        chunk.append(line)
    if chunk:
        pieces.append(_piece(chunk))
    return pieces


def _piece(lines: list[str]) -> _Piece:
    names: set[str] = set()
    for line in lines:
        found = _TOP_LOCAL.match(line)
        if found:
            names.update(part.strip() for part in (found[1] or found[2]).split(","))
    return _Piece(frozenset(names), "".join(lines))


PRELUDES: Final = {function: name for name in _lua_files() if name.startswith("_")
                   for function in _DEFINED.findall(file_text(name))}
"""Shared helpers: function name -> the ``lua/_<file>.lua`` that defines it."""

_WORD: Final = re.compile(r"\b\w+\b")
_NOT_CODE: Final = re.compile(
    r"--\[\[.*?\]\]|--[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|\[\[.*?\]\]", re.S)
"""Lua comments and string literals: a word there calls nothing (a comment's "wake-up"
must not prepend the ``wake`` helper, a closure per call, to a script)."""


def _code_words(text: str) -> set[str]:
    """The words of ``text``'s code, its comments and strings left out."""
    return set(_WORD.findall(_NOT_CODE.sub(" ", text)))


ROUTING_MARK: Final = 'job:"routing"'
"""The last of the keys a call declares for a cluster's routing only (``routing_keys``):
``<slot>job:"routing"<n>``, after the ``n`` others; never a stored key. Named like a
record (an ACL that lets a role write records lets it name this), with a quote no jid
may hold (``status.check_jid``), so no record's key is ever taken for it."""

_ROUTING_PRELUDE: Final = f"""\
-- Keys declared for a cluster's routing only (scripts.py ``routing_keys``): the queue's
-- live records and notes, which the record functions reach by name. Declared, a call
-- that would write them on a slot's old node after they moved to its new one is sent
-- on (TRYAGAIN, ASK) instead of making a second copy there. Off KEYS before it is read.
do
  local routed = tonumber(string.match(KEYS[#KEYS] or "", '{ROUTING_MARK}(%d+)$'))
  if routed then
    for _ = 0, routed do table.remove(KEYS) end
  end
end
"""


@cache
def routes_records(name: str) -> bool:
    """Whether script ``name`` writes status records (``_record.lua``): its calls declare
    the queue's live records and notes too (``routing_keys``)."""
    return "record_library" in _assembled(name)


def routing_keys(name: str, keys: Sequence[str], declared: Sequence[str] = ()) -> list[str]:
    """The keys a call of ``name`` declares beyond its own: for a script that writes
    records, the live records hash and the notes list of its keys' slot, ``declared``
    (keys it reaches by name: a once marker, a waiting job's copy) and the mark."""
    if not routes_records(name) or not keys or "}" not in keys[0]:
        return list(declared)
    slot = keys[0][:keys[0].index("}") + 2]  # "<ns>:{<queue>}:"
    extra = [f"{slot}jobs", f"{slot}batch_notes", *declared]
    return [*extra, f"{slot}{ROUTING_MARK}{len(extra)}"]


@cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua``, after the pieces of the shared helpers it calls,
    and of those they call in turn — only those: each top-level ``local function`` of a
    script costs a closure at every call of it (about 0.3 µs in Redis 7), so a helper
    file's unused functions would tax every move. A script that writes records starts by
    taking its routing keys off KEYS."""
    text = _assembled(name)
    return _ROUTING_PRELUDE + text if "record_library" in text else text


@cache
def _assembled(name: str) -> str:
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no script named {name!r}")
    text = file_text(name)
    pieces = [(file, piece) for file in sorted(set(PRELUDES.values()))
              for piece in _pieces(file)]
    defined = {word for _, piece in pieces for word in piece.defines}
    wanted = _code_words(text) & defined
    while True:  # what the wanted pieces use, until nothing new
        more = {word for _, piece in pieces if piece.defines & wanted
                for word in _code_words(piece.text)} & defined
        if more <= wanted:
            break
        wanted |= more
    return "".join(piece.text for _, piece in pieces if piece.defines & wanted) + text


@cache
def sha_of(name: str) -> str:
    return hashlib.sha1(source(name).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Call:
    """One script call: the script's name, its KEYS and its ARGV."""

    name: str
    keys: Sequence[str]
    args: Sequence[Any]
    declared: Sequence[str] = ()
    """Keys the script reaches by name, declared for a cluster's routing only."""
    routed: bool = False
    """On a cluster: the routing keys go with the call (a single server routes nothing:
    none are sent, and the script's prelude finds no mark)."""

    def _keys(self) -> Sequence[str]:
        if not self.routed:
            return self.keys
        return [*self.keys, *routing_keys(self.name, self.keys, self.declared)]

    def evalsha(self) -> tuple[Any, ...]:
        keys = self._keys()
        return (b"EVALSHA", sha_of(self.name), len(keys), *keys, *self.args)

    def eval(self) -> tuple[Any, ...]:
        keys = self._keys()
        return (b"EVAL", source(self.name), len(keys), *keys, *self.args)


def _not_run(reply: Any) -> bool:
    """A batched call's reply that says it did not run: not cached on its node, or its
    slot moved on in the middle of the batch (MOVED, ASK, TRYAGAIN)."""
    return isinstance(reply, NoScriptError) or (
        isinstance(reply, ResponseError) and redirect_of(reply) is not None)


class Scripts:
    """The async runner: every script the Store's parts run goes through it, on the
    hot-path lanes (``lane.py``; one per node on a cluster) or, across slots, a pipeline.
    ``durability`` (``durability.py``): what a durable call (an enqueue or a settle)
    waits for after it ran, in the same round trip."""

    def __init__(self, client: redis.asyncio.Redis,
                 durability: Durability | None = None) -> None:
        self.client = client
        self.durability = durability
        self.lane: Lane | ClusterLane = (
            ClusterLane(client) if isinstance(client, ClusterClient) else Lane(client))
        self.routed = isinstance(client, ClusterClient)
        """Calls declare their routing keys (``Call.routed``): on a cluster only."""
        self._durability_checked = False

    async def aclose(self) -> None:
        await self.lane.aclose()

    async def run(self, name: str, keys: Sequence[str], args: Sequence[Any], *,
                  durable: bool = False, declared: Sequence[str] = ()) -> Any:
        """Run script ``name``; raises what Redis replies as an error. ``declared``:
        keys it reaches by name (``Call.declared``)."""
        call = Call(name, keys, args, declared, self.routed)
        if durable and self.durability is not None:
            await self.check_durability()
            return await self._durably(call, self.durability)
        try:
            return await self.lane.call(*call.evalsha())
        except NoScriptError:  # nothing ran
            return await self.lane.call(*call.eval())

    async def run_many(self, calls: Sequence[Call], *, durable: bool = False) -> list[Any]:
        """``calls``, all in one slot, in one round trip on one connection — and, when
        ``durable``, the durability's ``WAIT``/``WAITAOF`` after them, which covers them
        all (a WAIT waits for its own connection's writes): ``NotDurable`` when not
        confirmed. A call that did not run (NOSCRIPT; or redirected, its slot moved on
        mid-batch) is run again alone, loaded and routed where the slot now is; any
        other error is raised, as the call's would be."""
        durability = self.durability if durable else None
        if durability is not None:
            await self.check_durability()
        calls = [self._on_this_server(call) for call in calls]
        commands = [call.evalsha() for call in calls]
        if durability is not None:
            commands.append(durability.command)
        replies = await self.lane.call_many(commands)
        confirmed = replies.pop() if durability is not None else None
        results = []
        for call, reply in zip(calls, replies, strict=True):
            if _not_run(reply):
                reply = await self._alone(call, durable=durable)
            elif isinstance(reply, Exception):
                raise reply
            results.append(reply)
        if durability is not None:  # a rerun waited on its own connection
            durability.check(confirmed)
        return results

    async def pipelined(self, calls: Sequence[Call]) -> list[Any]:
        """``calls`` in any slots, in one pipeline (one round trip per node); a reply
        that is an error is returned as such, one that did not run is run again alone."""
        calls = [self._on_this_server(call) for call in calls]
        async with self.client.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.execute_command(*call.evalsha())
            replies = await pipe.execute(raise_on_error=False)
        results = []
        for call, reply in zip(calls, replies, strict=True):
            if _not_run(reply):
                try:
                    reply = await self._alone(call, durable=False)
                except ResponseError as exc:
                    reply = exc
            results.append(reply)
        return results

    def _on_this_server(self, call: Call) -> Call:
        """``call`` with its routing keys on a cluster (``Call.routed``)."""
        return replace(call, routed=self.routed) if call.routed != self.routed else call

    async def _alone(self, call: Call, *, durable: bool) -> Any:
        """A batch's call that did not run, run alone. A slot still migrating may
        redirect it past the lane's bound (MOVED, ASK, TRYAGAIN: it did not run either):
        tried again, a few times, on a map read afresh."""
        for attempt in range(1, RERUNS + 1):
            try:
                if durable and self.durability is not None:
                    return await self._durably(call, self.durability)
                return await self.run(call.name, call.keys, call.args,
                                      declared=call.declared)
            except ResponseError as exc:
                if redirect_of(exc) is None or attempt == RERUNS:
                    raise
                if isinstance(self.client, ClusterClient):
                    self.client.mark_stale()
                await anyio.sleep(RERUN_PAUSE * attempt)
        raise AssertionError("unreachable")

    async def _durably(self, call: Call, durability: Durability) -> Any:
        """One call and the durability's WAIT, on one connection."""
        reply, confirmed = await self.lane.call_many([call.evalsha(), durability.command])
        if isinstance(reply, NoScriptError):  # nothing ran: sent whole
            reply, confirmed = await self.lane.call_many([call.eval(), durability.command])
        if isinstance(reply, Exception):
            raise reply
        durability.check(confirmed)
        return reply

    async def check_durability(self) -> None:
        """Before the first durable write: can this server confirm at all? A server
        without WAITAOF, or without its AOF on, would run every write and then refuse
        the confirmation — each enqueue raising as if its reply were lost, and its
        caller's retry pushing the job again. Asked once, with nothing written yet."""
        durability = self.durability
        if self._durability_checked or durability is None:
            return
        probe = durability.probe
        if probe is not None:
            try:
                await self.lane.call(*probe)
            except ResponseError as exc:
                raise ConfigurationError(durability.unusable(exc)) from None
        self._durability_checked = True


class SyncScript:
    """One script for a blocking client (the heartbeat's thread), by the same rule."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    @classmethod
    def named(cls, name: str) -> SyncScript:
        return cls(source(name))

    def run(self, client: redis.Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:  # nothing ran
            return client.eval(self.text, len(keys), *keys, *args)
