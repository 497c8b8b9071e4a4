"""Lane: the hot path's script calls on connections of their own. Same semantics as one
client command with retries off, on a real server: a flushed script is loaded and run
once, a connection whose server went away is replaced before anything is sent, and a
call cancelled mid-flight never leaves its reply for the next caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import redis.asyncio
import redis.exceptions

from cogworker_async.redis.connection import connect
from cogworker_async.redis.errors import classify, closed_transport, maybe_ran
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.lane import Lane
from cogworker_async.redis.store import Store
from tests.servers import ServerProcess


@pytest.fixture
def private_server() -> Iterator[ServerProcess]:
    server = ServerProcess().start()
    yield server
    server.cleanup()


async def test_a_script_flushed_from_the_server_is_loaded_and_run_once(store: Store) -> None:
    await store.enqueue("q", [b"one"])
    await store.client.script_flush()
    await store.enqueue("q", [b"two"])
    assert await store.client.lrange(store.keys.queue("q"), 0, -1) == [b"two", b"one"]


async def test_a_connection_whose_server_restarted_is_replaced_before_use(
    private_server: ServerProcess,
) -> None:
    store = Store.from_url(private_server.url, "lane")
    try:
        await store.enqueue("q", [b"before"])
        # Restarted from a thread, as it happens in life: the event loop runs meanwhile
        # and sees the old server close the idle connection.
        await anyio.to_thread.run_sync(_restart, private_server)
        # The idle connection has EOF pending: it is replaced, and the call succeeds
        # without an error the caller would have to treat as uncertain. So does the
        # first push on a queue this Store has not registered yet: the registration
        # (SADD of the queue's name) is part of the enqueue, and must not be the one
        # call of it sent on a connection the restart closed.
        await store.enqueue("q", [b"after"])
        await store.enqueue("new", [b"first"])
    finally:
        await store.aclose()
    # Read back on a connection of the test's own (the Store's pool is not under test).
    async with redis.asyncio.Redis.from_url(private_server.url) as reader:
        keys = Keys("lane")
        assert await reader.lrange(keys.queue("q"), 0, -1) == [b"after"]
        assert await reader.lrange(keys.queue("new"), 0, -1) == [b"first"]
        assert b"new" in await reader.smembers(keys.queues)


def _restart(server: ServerProcess) -> None:
    server.stop()
    server.start()  # same port, empty (no persistence)


async def test_a_call_cancelled_in_flight_leaves_no_reply_for_the_next(
    private_server: ServerProcess,
) -> None:
    store = Store.from_url(private_server.url, "lane")
    try:
        await _cancel_one_fetch_then_fetch(store)
    finally:
        await store.aclose()


async def _cancel_one_fetch_then_fetch(store: Store) -> None:
    await store.enqueue("q", [b"a", b"b"])
    # The server holds writes for 300 ms: the first fetch is cancelled while its reply
    # is outstanding.
    await store.client.execute_command(  # type: ignore[no-untyped-call]
        "CLIENT", "PAUSE", "300", "WRITE")
    with anyio.move_on_after(0.05) as waited:
        await store.fetch("lane-test", ["q"], 1)
    assert waited.cancelled_caught
    fetched = await store.fetch("lane-test", ["q"], 1)
    # The reply read is this call's own: one job, which this call moved. (Had the
    # cancelled call run on the server, its job would sit on the in-progress list
    # too, where reconcile finds it; its reply never reaches this caller.)
    assert len(fetched.jobs) == 1
    in_progress = await store.client.lrange(store.keys.in_progress("q", "lane-test"), 0, -1)
    assert fetched.jobs[0][1] in in_progress
    assert await store.client.llen(store.keys.queue("q")) + len(in_progress) == 2


async def test_an_idle_connection_already_closed_is_replaced_before_anything_is_sent(
    redis_server: ServerProcess,
) -> None:
    """A server that died with bytes unread resets the connection: no EOF for
    ``can_read`` to see, but the loop has closed the transport. The next call must not
    be sent on it (it would fail, its outcome unknown): it takes a fresh connection."""
    client = connect(redis_server.url)
    lane = Lane(client)
    try:
        assert await lane.call(b"PING") == b"PONG"
        closed = lane._idle[0]
        closed._writer.transport.close()  # type: ignore[union-attr]
        assert await lane.call(b"PING") == b"PONG"
        assert lane._idle[0] is not closed
    finally:
        await lane.aclose()
        await client.aclose()


def test_on_uvloop_a_connection_the_server_reset_is_a_lost_connection(
    redis_server: ServerProcess,
) -> None:
    """uvloop raises ``RuntimeError`` ("the handler is closed") for a write on a transport
    a reset already closed; redis-py passes it on. Seen as a bug, it ended a worker on a
    cluster whose master was killed. The lane says it as what it is: a lost connection,
    one that may have run (it was being sent), so the settle is retried, not the job."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> BaseException:
        client = connect(redis_server.url)
        lane = Lane(client)
        try:
            assert await lane.call(b"PING") == b"PONG"
            # A connection found closed when taken is replaced (``_take``): the reset
            # here lands between the take and the send, the window no check can close.
            take = lane._take

            async def reset_after_take() -> Any:
                conn = await take()
                conn._writer.transport.close()  # type: ignore[union-attr]
                return conn

            lane._take = reset_after_take  # type: ignore[method-assign]
            with pytest.raises(redis.exceptions.ConnectionError) as lost:
                await lane.call(b"PING")
            lane._take = take  # type: ignore[method-assign]
            assert await lane.call(b"PING") == b"PONG"  # the next call connects afresh
            return lost.value
        finally:
            await lane.aclose()
            await client.aclose()

    lost = uvloop.run(main())
    if lost.__cause__ is not None:  # redis-py < 8.2 passes uvloop's RuntimeError on
        assert isinstance(lost.__cause__, RuntimeError)
        assert closed_transport(lost.__cause__)
    assert classify(lost) == "unreachable"
    assert maybe_ran(lost)
