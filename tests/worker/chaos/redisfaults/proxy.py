"""A small asyncio TCP proxy that loses chosen replies (docs/design.md, rule 1).

It sits on 127.0.0.1 between a worker and its Redis and passes bytes both ways, reading
the RESP stream so it knows which reply answers which request. A ``DropReply`` rule
names a script by its SHA1: the matching ``EVALSHA`` request is forwarded (the script
runs), and if its reply satisfies the rule's test, the reply is swallowed and both
sockets are closed — the client sees a connection error with no way to know whether
the script ran. Pub/sub connections are passed through untouched.

The proxy lives in the test's event loop; ``aclose()`` stops the listener and every
connection it opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

INCOMPLETE: Final = object()
READ_SIZE: Final = 65536


class ReplyError(bytes):
    """A RESP error reply (``-ERR ...``, or a RESP3 blob error)."""


class Push(list[Any]):
    """A RESP3 push (``>``): out of band, it answers no request."""


_SCALARS: Final[dict[bytes, Callable[[bytes], Any]]] = {
    b"+": bytes, b"-": ReplyError, b":": int, b"(": int, b",": float,
    b"#": lambda line: line == b"t", b"_": lambda line: None,
}
_BLOBS: Final[dict[bytes, Callable[[bytes], Any]]] = {b"$": bytes, b"=": bytes,
                                                      b"!": ReplyError}
_AGGREGATES: Final[dict[bytes, tuple[int, Callable[[list[Any]], Any]]]] = {
    b"*": (1, list), b"~": (1, list), b">": (1, Push), b"%": (2, list), b"|": (2, list),
}


def parse(buf: bytes | bytearray, pos: int = 0) -> tuple[Any, int]:
    """One RESP2/RESP3 value from ``buf`` at ``pos``: ``(value, next_pos)``, or
    ``(INCOMPLETE, pos)`` if the buffer does not hold all of it yet. (redis-py 8 speaks
    RESP3: maps, sets, pushes...; only what a request or reply needs is kept.)"""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return INCOMPLETE, pos
    kind, line, after = bytes(buf[pos:pos + 1]), bytes(buf[pos + 1:end]), end + 2
    if kind in _SCALARS:
        return _SCALARS[kind](line), after
    if kind in _BLOBS:
        return _blob(buf, pos, kind, int(line), after)
    if kind in _AGGREGATES:
        return _aggregate(buf, pos, kind, int(line), after)
    raise ValueError(f"unexpected RESP type {kind!r} at {pos}")


def _blob(buf: bytes | bytearray, pos: int, kind: bytes, size: int, after: int
          ) -> tuple[Any, int]:
    if size < 0:
        return None, after
    if len(buf) < after + size + 2:
        return INCOMPLETE, pos
    return _BLOBS[kind](bytes(buf[after:after + size])), after + size + 2


def _aggregate(buf: bytes | bytearray, pos: int, kind: bytes, count: int, after: int
               ) -> tuple[Any, int]:
    if count < 0:
        return None, after
    per, make = _AGGREGATES[kind]
    items = []
    for _ in range(count * per):
        item, after = parse(buf, after)
        if item is INCOMPLETE:
            return INCOMPLETE, pos
        items.append(item)
    if kind == b"|":  # attributes come before the value they describe
        value, after = parse(buf, after)
        return (INCOMPLETE, pos) if value is INCOMPLETE else (value, after)
    return make(items), after


@dataclass
class DropReply:
    """Swallow the reply to ``EVALSHA <sha>`` when ``when(reply)`` holds, ``times`` times."""

    sha: str
    when: Callable[[Any], bool] = lambda reply: True
    times: int = 1
    requests: int = 0
    """Matching requests seen (dropped or not)."""
    dropped: list[tuple[float, Any]] = field(default_factory=list)
    """(time.time(), reply) of each swallowed reply."""

    def matches(self, command: list[Any]) -> bool:
        return (len(command) > 1 and isinstance(command[0], bytes)
                and command[0].upper() == b"EVALSHA"
                and command[1] == self.sha.encode())

    @property
    def armed(self) -> bool:
        return len(self.dropped) < self.times


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: LostReplyProxy, client: tuple[asyncio.StreamReader,
                 asyncio.StreamWriter], server: tuple[asyncio.StreamReader,
                 asyncio.StreamWriter]) -> None:
        self.proxy = proxy
        self.client_reader, self.client_writer = client
        self.server_reader, self.server_writer = server
        self.waiting: deque[DropReply | None] = deque()
        """One entry per forwarded request, oldest first: the rule judging its reply."""
        self.raw = False
        """Pub/sub (or anything unparseable): bytes pass through, nothing is judged."""

    async def upstream(self) -> None:
        buf = bytearray()
        while data := await self.client_reader.read(READ_SIZE):
            if self.raw:
                self.server_writer.write(data)
                await self.server_writer.drain()
                continue
            buf += data
            pos, out = 0, bytearray()
            while True:
                command, after = parse(buf, pos)
                if command is INCOMPLETE:
                    break
                if isinstance(command, list) and command and isinstance(command[0], bytes) \
                        and command[0].upper() in (b"SUBSCRIBE", b"PSUBSCRIBE", b"SSUBSCRIBE"):
                    self.raw = True
                self.waiting.append(self.proxy.rule_for(command))
                out += buf[pos:after]
                pos = after
            if self.raw:
                out += buf[pos:]
                pos = len(buf)
            del buf[:pos]
            self.server_writer.write(bytes(out))
            await self.server_writer.drain()

    async def downstream(self) -> None:
        buf = bytearray()
        while data := await self.server_reader.read(READ_SIZE):
            if self.raw:
                self.client_writer.write(bytes(buf) + data)
                buf.clear()
                await self.client_writer.drain()
                continue
            buf += data
            pos, out = 0, bytearray()
            while True:
                reply, after = parse(buf, pos)
                if reply is INCOMPLETE:
                    break
                if isinstance(reply, Push):  # answers no request: pass it on
                    out += buf[pos:after]
                    pos = after
                    continue
                rule = self.waiting.popleft() if self.waiting else None
                if rule is not None and rule.armed and rule.when(reply):
                    rule.dropped.append((time.time(), reply))
                    # What came before this reply is delivered; this one and anything
                    # after it is lost with the connection.
                    self.client_writer.write(bytes(out))
                    self.close()
                    return
                out += buf[pos:after]
                pos = after
            del buf[:pos]
            self.client_writer.write(bytes(out))
            await self.client_writer.drain()

    def close(self) -> None:
        for writer in (self.client_writer, self.server_writer):
            writer.transport.abort()


class LostReplyProxy:
    """``127.0.0.1:<port>`` -> ``127.0.0.1:<upstream_port>``, losing the replies the
    armed ``DropReply`` rules pick."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.rules: list[DropReply] = []
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._links: set[_Link] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, rule: DropReply) -> DropReply:
        self.rules.append(rule)
        return rule

    def rule_for(self, command: Any) -> DropReply | None:
        if not isinstance(command, list):
            return None
        for rule in self.rules:
            if rule.matches(command):
                rule.requests += 1
                return rule if rule.armed else None
        return None

    async def start(self) -> LostReplyProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.transport.abort()
            self._tasks.discard(task)
            return
        link = _Link(self, (reader, writer), upstream)
        self._links.add(link)
        pumps = [asyncio.ensure_future(link.upstream()),
                 asyncio.ensure_future(link.downstream())]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            # Connection errors end a link (they are the point here): not reported.
            await asyncio.gather(*pumps, return_exceptions=True)
            link.close()
            self._links.discard(link)
            self._tasks.discard(task)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        # Closing the sockets ends each connection's pumps, then its handler. (A handler
        # task cancelled instead makes asyncio's start_server log an error.)
        for link in list(self._links):
            link.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
