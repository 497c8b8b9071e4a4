"""Lane: script calls on connections of their own, without the client's per-call layers.

Every step of the hot path — enqueue, fetch, ack, file — is one EVALSHA. Through
redis-py's client, each call also takes the pool's asyncio lock, moves the connection
between its free list and in-use set, re-checks it, records observability counters and
encodes every argument in Python: measured on uvloop, 73-78 µs of CPU per call against
27-40 µs here (``benchmarks/``; the whole enqueue and no-op job path gained about a
third). The semantics are those of one client command with retries off: one attempt,
the reply or the error reaches the caller, and a connection that fails or is cancelled
mid-call is closed — never reused with a reply still pending on it.

Pipelines, pub/sub and plain commands keep using the client.

On a Redis Cluster there is one lane per node (``cluster.ClusterLane`` routes each call
to the node that serves its keys' slot).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import anyio
import hiredis
import redis.asyncio
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as LostConnection
from redis.exceptions import ResponseError

from cogworker_async.redis.errors import as_lost, closed_transport

MAX_IDLE: Final = 128
"""Idle connections kept; more are closed as they come back (a burst of concurrent
calls may open many)."""


def _raised(reply: Any) -> Any:
    if isinstance(reply, ResponseError):
        raise reply
    return reply


def _closing(conn: AbstractConnection) -> bool:
    """The transport has seen its end: a server that died with bytes unread resets the
    connection (no EOF for ``can_read`` to see), which the loop has already noted."""
    writer = getattr(conn, "_writer", None)
    return writer is None or bool(writer.is_closing())


class Lane:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._pool = client.connection_pool
        # A sentinel-managed pool's (sentinel.py): where the master is, asked at most
        # every FOLLOW_EVERY, and whether a connection still goes to it.
        self._follow: Callable[[], Awaitable[None]] | None = getattr(
            self._pool, "follow", None)
        self._owns: Callable[[AbstractConnection], bool] | None = getattr(
            self._pool, "reaches_master", None)
        self._idle: deque[AbstractConnection] = deque()
        self._closed = False

    async def evalsha(self, sha: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """``EVALSHA sha`` with ``keys`` and ``args``; raises what Redis replies as an
        error (``NoScriptError`` included: nothing ran) or the connection's failure."""
        return await self.call(b"EVALSHA", sha, len(keys), *keys, *args)

    async def call(self, *command: Any) -> Any:
        """One command, one reply (or the error it raised)."""
        (reply,) = await self._send(hiredis.pack_command(command), replies=1)
        return _raised(reply)

    async def call_asking(self, *command: Any) -> Any:
        """``command`` after ``ASKING`` on the same connection (a cluster's ASK
        redirect: the slot is migrating to this node)."""
        return _raised((await self.call_many([command], asking=True))[0])

    async def call_many(self, commands: Sequence[Sequence[Any]], *,
                        asking: bool = False) -> list[Any]:
        """``commands`` sent together on one connection, their replies in order, an
        error reply as a ``ResponseError`` value (not raised: the caller reads what each
        means). One connection matters to ``WAIT``: it waits for the writes made on its
        own connection (``durability.py``). ``asking``: ``ASKING`` before the first."""
        packed = b"".join(hiredis.pack_command(tuple(command)) for command in commands)
        if asking:
            packed = hiredis.pack_command((b"ASKING",)) + packed
        replies = await self._send(packed, replies=len(commands) + asking)
        return replies[1:] if asking else replies

    async def _send(self, packed: bytes, *, replies: int) -> list[Any]:
        conn = await self._take()
        answers: list[Any] = []
        try:
            await conn.send_packed_command(packed, check_health=True)
            for _ in range(replies):  # every reply is read, errors included: none is
                try:  # left on a connection that goes back to the idle list
                    answers.append(await conn.read_response())
                except ResponseError as exc:
                    answers.append(exc)
        except RuntimeError as exc:
            await self._close(conn)
            if closed_transport(exc):  # uvloop: the server reset it (errors.py)
                raise as_lost(exc, connecting=False) from exc
            raise
        except BaseException:
            await self._close(conn)
            raise
        await self._give(conn)  # error replies were read whole: the connection is clean
        return answers

    async def _take(self) -> AbstractConnection:
        if self._follow is not None:  # through sentinels: is the master where it was?
            await self._follow()
        while self._idle:
            conn = self._idle.pop()
            # A connection whose server went away (restart, idle timeout) has EOF
            # pending: replaced here, before anything is sent, as the client's pool does;
            # so is one to a node that is no longer the master (sentinel.py).
            try:
                if (conn.is_connected and not _closing(conn)
                        and (self._owns is None or self._owns(conn))
                        and not await conn.can_read()):
                    return conn
            except (LostConnection, OSError):  # redis-py's or the socket's: same verdict
                pass
            await self._close(conn)
        return await self._connect()

    async def _connect(self) -> AbstractConnection:
        """A new connection with the client's settings (URL, timeouts, auth, db)."""
        fresh: AbstractConnection = self._pool.make_connection()  # type: ignore[no-untyped-call]
        try:
            await fresh.connect()  # type: ignore[no-untyped-call]
        except RuntimeError as exc:
            await self._close(fresh)
            if closed_transport(exc):  # uvloop: reset during the handshake (errors.py)
                raise as_lost(exc, connecting=True) from exc
            raise
        except BaseException:  # refused, timed out, or cancelled mid-handshake
            await self._close(fresh)
            raise
        return fresh

    async def _give(self, conn: AbstractConnection) -> None:
        if self._closed or len(self._idle) >= MAX_IDLE:
            await self._close(conn)
        else:
            self._idle.append(conn)

    @staticmethod
    async def _close(conn: AbstractConnection) -> None:
        with anyio.CancelScope(shield=True):
            await conn.disconnect(nowait=True)

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            await self._close(self._idle.pop())

