"""Clients that follow a master watched by Redis Sentinel.

Every connection — the pool's, the hot path's lane, the wake-up subscriber's and the
heartbeat thread's — is a redis-py *sentinel-managed* connection: each new connection
asks the sentinels where the master of the service is before connecting, and a
``READONLY`` reply (the node was demoted: a failover happened while we were connected)
closes the connection and is raised as a lost connection. So after a failover nothing
stays on the demoted node: the call that met ``READONLY`` fails as one whose reply was
lost would (its script did not run: a replica refuses a writing script before it
starts), and the next connection goes to the new master. A failover also closes the
clients of the old master (Sentinel sends ``CLIENT KILL`` when it demotes it), which
the lane and the pool notice before they send on them.

But Sentinel demotes a forced failover's old master only some seconds after it promoted
the replica (it waits for the old master to report in), and until then the old master
still takes writes — writes the new master never sees, lost when the old one resyncs
as its replica. Measured here: a client that only re-asked on a new connection wrote
to the old master for about 10 s after ``SENTINEL FAILOVER``, and two thirds of its
acknowledged enqueues were gone. So the pools here also re-ask the sentinels when a
connection is taken, at most every ``FOLLOW_EVERY``, and drop every idle connection to
a node that is no longer the master (``reaches_master``, which the lane checks too).

While the sentinels name no master (mid-failover, or all down), a connection fails
with ``MasterNotFoundError``, a ``ConnectionError`` that certainly sent nothing: the
worker rides it out as it rides out any Redis outage.

Retries stay off (``connection.py``): a command is never sent twice by the library.
"""

from __future__ import annotations

import math
import time
from typing import Any, Final

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from cogworker_async.redis import urls

FOLLOW_EVERY: Final = 0.5
"""Seconds between two questions to the sentinels about where the master is (one
``SENTINEL MASTERS`` round trip, taken with a connection): the longest a process keeps
writing to a master the sentinels have replaced."""

SENTINEL_TIMEOUT: Final = 2.0
"""Seconds to wait for one sentinel's answer before asking the next: the sentinels are
asked in turn, and one that is down or cut off must not hold up the search for the
master for a whole command timeout."""

MasterNotFound = redis.asyncio.sentinel.MasterNotFoundError
"""No sentinel could name a master: nothing was sent."""


class _FollowingPool(redis.asyncio.sentinel.SentinelConnectionPool):
    """A master's pool that re-asks the sentinels when a connection is taken, at most
    every ``FOLLOW_EVERY``: a change of master closes the idle connections to the old
    one (redis-py's ``get_master_address``), and a connection in use is closed when it
    comes back."""

    _asked_at = -math.inf

    async def follow(self) -> None:
        now = time.monotonic()
        if now - self._asked_at < FOLLOW_EVERY:
            return
        self._asked_at = now
        try:
            await self.get_master_address()  # type: ignore[no-untyped-call]
        except MasterNotFound:
            pass  # connecting says so, as a lost connection the caller rides out

    def reaches_master(self, conn: Any) -> bool:
        """Does ``conn`` go to the node last named master (or is none named yet)?
        (redis-py's async ``owns_connection`` would say, but it fails in 8.1.)"""
        return self.master_address is None or (conn.host, conn.port) == self.master_address

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        await self.follow()
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]

    async def ensure_connection(self, connection: Any) -> None:
        # Checked on every connection taken: redis-py drops the idle connections when it
        # sees the master change, but a task cancelled in that drop (or one that took a
        # connection just before it) would keep writing to the old master, which then
        # discards those writes when it rejoins as a replica.
        if connection.is_connected and not self.reaches_master(connection):
            await connection.disconnect()  # reconnects through the sentinels
        await super().ensure_connection(connection)

    async def release(self, connection: Any) -> None:
        if not self.reaches_master(connection):  # in use when the master changed
            await connection.disconnect()
        await super().release(connection)


class _FollowingPoolSync(redis.sentinel.SentinelConnectionPool):
    """``_FollowingPool`` for the heartbeat thread's blocking client."""

    _asked_at = -math.inf

    def follow(self) -> None:
        now = time.monotonic()
        if now - self._asked_at < FOLLOW_EVERY:
            return
        self._asked_at = now
        try:
            self.get_master_address()  # type: ignore[no-untyped-call]
        except redis.sentinel.MasterNotFoundError:
            pass

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        self.follow()
        return super().get_connection(*args, **kwargs)


class _SentinelRedis(redis.asyncio.Redis):
    """An async client of the master that also closes its sentinels' connections."""

    sentinels: redis.asyncio.sentinel.Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinels is not None:
            await self.sentinels.aclose()


class _SentinelRedisSync(redis.Redis):
    """A blocking client of the master that also closes its sentinels' connections."""

    sentinels: redis.sentinel.Sentinel | None = None

    def close(self) -> None:
        super().close()
        if self.sentinels is not None:
            for client in self.sentinels.sentinels:
                client.close()


def _settings(parsed: urls.SentinelURL, timeout: float,
              retry: Any, driver: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the master's connection settings, the sentinels' connection settings)."""
    tls: dict[str, Any] = {}
    if parsed.tls:
        tls["ssl"] = True
        for name, value in parsed.options.items():
            tls[name] = (value.lower() in ("1", "true", "yes")
                         if name == "ssl_check_hostname" else value)
    master = {
        "db": parsed.db, "username": parsed.username, "password": parsed.password,
        "socket_timeout": timeout, "socket_connect_timeout": timeout,
        "socket_keepalive": True, "retry": retry, **tls, **driver,
    }
    sentinels = {
        "username": parsed.sentinel_username, "password": parsed.sentinel_password,
        "socket_timeout": min(timeout, SENTINEL_TIMEOUT),
        "socket_connect_timeout": min(timeout, SENTINEL_TIMEOUT),
        "retry": retry, **tls, **driver,
    }
    return master, sentinels


def connect(parsed: urls.SentinelURL, *, timeout: float, retry: Any,
            driver: dict[str, Any]) -> redis.asyncio.Redis:
    """An async client of the service's master, wherever the sentinels say it is."""
    master, sentinels = _settings(parsed, timeout, retry, driver)
    watch = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(parsed.sentinels), sentinel_kwargs=sentinels)
    client = watch.master_for(parsed.service, redis_class=_SentinelRedis,
                              connection_pool_class=_FollowingPool,
                              health_check_interval=30, **master)
    client.sentinels = watch
    return client  # type: ignore[no-any-return]


def connect_sync(parsed: urls.SentinelURL, *, timeout: float, retry: Any,
                 driver: dict[str, Any]) -> redis.Redis:
    """A blocking client of the service's master (the heartbeat thread's)."""
    master, sentinels = _settings(parsed, timeout, retry, driver)
    watch = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(parsed.sentinels), sentinel_kwargs=sentinels)
    client = watch.master_for(  # type: ignore[no-untyped-call, unused-ignore]
        parsed.service, redis_class=_SentinelRedisSync,
        connection_pool_class=_FollowingPoolSync, **master)
    client.sentinels = watch
    return client  # type: ignore[no-any-return]


def follows(client: redis.asyncio.Redis) -> bool:
    """Does ``client`` follow the master the sentinels name?"""
    return isinstance(client.connection_pool, _FollowingPool)


async def replaced(client: redis.asyncio.Redis, conn: Any) -> bool:
    """Is the node ``conn`` talks to no longer the master? (The sentinels are asked at
    most every ``FOLLOW_EVERY``.) Always False for a client not behind sentinels."""
    pool = client.connection_pool
    if not isinstance(pool, _FollowingPool):
        return False
    await pool.follow()
    return not pool.reaches_master(conn)
