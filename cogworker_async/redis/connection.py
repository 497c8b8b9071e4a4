"""Clients from a URL, with redis-py's blind retries switched off, and the server check.

redis-py re-sends any command after a connection error or timeout by default. For a move
that is wrong: a lost reply to a fetch would move a *second* job onto the in-progress
list that nobody tracks, and a re-sent enqueue pushes the job twice. Every client here
has retries off; the worker retries knowing what each script does (they are idempotent
where it matters), and reconciles its own in-progress list after an uncertain reply.
"""

from __future__ import annotations

import asyncio
import logging
import select
from dataclasses import dataclass
from typing import Any, Final

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.cluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.retry import Retry as SyncRetry

from cogworker_async.errors import ConfigurationError
from cogworker_async.redis import embedded, sentinel, urls
from cogworker_async.redis.cluster import ClusterClient

log = logging.getLogger(__name__)

MIN_RELIABLE_VERSION: Final = (6, 2)
"""LMOVE and LPOS, which reliable fetch and the settle scripts need."""

SOCKET_TIMEOUT: Final = 10.0
"""Seconds before a command with no reply is given up (and treated as uncertain)."""


def _driver() -> dict[str, Any]:
    """The library version sent with CLIENT SETINFO, given up front: left to itself,
    redis-py looks it up in the installed packages' metadata for every new connection
    (about 4 ms each; a worker opens several as it starts)."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # redis-py < 8
        return {"lib_version": redis.__version__}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


DRIVER: Final = _driver()


def is_cluster(client: object) -> bool:
    """Is ``client`` a Redis Cluster client (async or blocking)?"""
    return isinstance(client, ClusterClient | redis.cluster.RedisCluster)


def _cluster_settings(url: str) -> tuple[urls.ClusterURL, dict[str, Any]]:
    parsed = urls.cluster_url(url)
    settings: dict[str, Any] = {
        "username": parsed.username,
        "password": parsed.password,
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": SOCKET_TIMEOUT,
        "socket_keepalive": True,
        **DRIVER,
    }
    if parsed.tls:
        settings["ssl"] = True
        for name, value in parsed.options.items():
            settings[name] = (value.lower() in ("1", "true", "yes")
                              if name == "ssl_check_hostname" else value)
    return parsed, settings


class RestartingConnection(redis.asyncio.connection.UnixDomainSocketConnection):
    """A connection to the embedded server that starts it again when it finds nothing
    listening (crashed, or stopped by hand), then connects: only a refused connect takes
    that path. An idle connection is also asked whether its server went away before it
    is used again (one ``select``, on the embedded server only), so that the first call
    after a crash reconnects (and restarts it) instead of failing: asyncio notes a
    server's end only once its loop has read the socket."""

    def __init__(self, *, embedded_server: embedded.EmbeddedServer, **kwargs: Any) -> None:
        self.embedded = embedded_server
        super().__init__(**kwargs)

    async def can_read(self) -> bool:
        return await super().can_read() or self._ended()

    async def can_read_destructive(self) -> bool:
        return await super().can_read_destructive() or self._ended()

    def _ended(self) -> bool:
        """Readable while nothing is pending: EOF or a reset (the server is gone)."""
        transport = self._writer.transport if self._writer is not None else None
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None:
            return True
        readable, _, _ = select.select([sock.fileno()], [], [], 0)
        return bool(readable)

    async def _connect(self) -> None:
        self.embedded.check_socket()  # not another's, put there since (embedded.py)
        try:
            await super()._connect()  # type: ignore[no-untyped-call]
        except (FileNotFoundError, ConnectionRefusedError):
            log.warning("the embedded server in %s is not running: starting it again",
                        self.embedded.data_dir)
            await asyncio.to_thread(self.embedded.start)  # it blocks: a lock, a spawn
            await super()._connect()  # type: ignore[no-untyped-call]


def connect(url: str) -> redis.asyncio.Redis:
    """An async client for ``url`` (``redis://``, ``rediss://``, ``unix://``, or a cluster's
    ``redis+cluster://``), retries off.

    On a cluster, MOVED, ASK and TRYAGAIN are followed (a redirected command did not run
    on the node that answered so: sending it where the slot lives is no blind retry) and
    the slot map re-read after a failed connection (``cluster.ClusterClient``); a command
    is never sent again after a lost connection or timeout, there as here.

    Through sentinels (``redis+sentinel://``), every connection is made to the master
    they name, and one that finds its node demoted is dropped (``sentinel.py``)."""
    if urls.scheme_of(url) in urls.SENTINEL_SCHEMES:
        return sentinel.connect(urls.sentinel_url(url), timeout=SOCKET_TIMEOUT,
                                retry=Retry(NoBackoff(), 0), driver=DRIVER)
    if urls.scheme_of(url) in urls.CLUSTER_SCHEMES:
        parsed, settings = _cluster_settings(url)
        return ClusterClient(parsed.nodes, retry=Retry(NoBackoff(), 0),
                             health_check_interval=30, **settings)
    url = urls.check(url)  # its query may not override the settings below
    server = embedded.restarter(url)
    if server is not None:  # found again, or started again, if it stops answering
        return redis.asyncio.Redis.from_pool(redis.asyncio.ConnectionPool(
            connection_class=RestartingConnection, embedded_server=server,
            path=server.socket_path, retry=Retry(NoBackoff(), 0),
            socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT,
            health_check_interval=30, **DRIVER))
    tcp = {} if url.startswith("unix://") else {"socket_keepalive": True}
    return redis.asyncio.Redis.from_url(
        url,
        retry=Retry(NoBackoff(), 0),
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
        health_check_interval=30,
        **tcp,
        **DRIVER,
    )


def connect_sync(url: str, *, timeout: float = SOCKET_TIMEOUT) -> redis.Redis:
    """A blocking client for ``url``, retries off (the heartbeat's), giving up a call
    after ``timeout`` seconds without a reply."""
    if urls.scheme_of(url) in urls.SENTINEL_SCHEMES:
        return sentinel.connect_sync(urls.sentinel_url(url), timeout=timeout,
                                     retry=SyncRetry(NoBackoff(), 0), driver=DRIVER)
    if urls.scheme_of(url) in urls.CLUSTER_SCHEMES:
        parsed, settings = _cluster_settings(url)
        settings.update(socket_timeout=timeout, socket_connect_timeout=timeout)
        cluster = redis.cluster.RedisCluster(
            startup_nodes=[redis.cluster.ClusterNode(host, port)  # type: ignore[no-untyped-call]
                           for host, port in parsed.nodes],
            retry=SyncRetry(NoBackoff(), 0),
            **settings,
        )
        return cluster  # type: ignore[return-value]
    return redis.Redis.from_url(
        urls.check(url),
        retry=SyncRetry(NoBackoff(), 0),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        **DRIVER,
    )


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the start-up checks read. ``None``: not known, because the server refused to
    say (a Redis user without ``+info``); ``skipped`` names the checks that could not be
    made and why, for the one warning line ``check_server`` writes."""

    version: tuple[int, ...] | None
    maxmemory_policy: str | None
    skipped: str | None = None


def parse_version(text: str) -> tuple[int, ...]:
    """``"7.0.15"`` -> ``(7, 0, 15)``; unknown parts count as 0."""
    parts = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _refusal(command: str, exc: redis.exceptions.ResponseError) -> str:
    """``"INFO refused (NOPERM this user has no permissions ...)"``: redis-py drops the
    NOPERM prefix from the message, and it is the word an operator searches for."""
    prefix = "NOPERM " if isinstance(exc, redis.exceptions.NoPermissionError) else ""
    return f"{command} refused ({prefix}{exc})"


async def maxmemory_policy(client: redis.asyncio.Redis) -> tuple[str | None, str | None]:
    """(``maxmemory-policy``, why it is unknown). ``INFO memory`` reports it (Redis >= 4,
    Valkey), and is asked first: ``CONFIG GET`` reads every setting, ``requirepass``
    included, so a least-privilege user is not given it, and each refusal is an entry
    in the server's ACL LOG. CONFIG GET only for a server whose INFO leaves it out."""
    try:
        memory = await client.info("memory")
    except redis.exceptions.ResponseError as exc:
        return None, _refusal("INFO", exc)
    if "maxmemory_policy" in memory:
        return str(memory["maxmemory_policy"]), None
    try:
        reply = await client.config_get("maxmemory-policy")
    except redis.exceptions.ResponseError as exc:  # refused (ACL), or disabled (managed)
        return None, _refusal("CONFIG GET", exc)
    policy = reply.get("maxmemory-policy")
    return (str(policy), None) if policy is not None else (None, "not reported")


async def server_info(client: redis.asyncio.Redis) -> ServerInfo:
    """The server's version and eviction policy, as far as this Redis user may read them:
    a refused INFO or CONFIG skips the checks that need it rather than stopping the
    worker (the queue works without them; they only catch a misconfigured server)."""
    try:
        info = await client.info("server")
    except redis.exceptions.ResponseError as exc:
        why = _refusal("INFO", exc)
        return ServerInfo(None, None, skipped=f"server version and maxmemory-policy: {why}; "
                                              "grant the Redis user +info to have them made")
    # Valkey reports a frozen redis_version (7.2.4); either is new enough to compare.
    version = parse_version(str(info.get("valkey_version") or info.get("redis_version", "0")))
    policy, unknown = await maxmemory_policy(client)
    skipped = f"maxmemory-policy: {unknown}" if unknown else None
    return ServerInfo(version=version, maxmemory_policy=policy, skipped=skipped)


async def check_server(client: redis.asyncio.Redis, *, reliable: bool) -> ServerInfo:
    """Refuse a server too old for reliable fetch; warn when it may evict jobs; say in
    one line which of these checks could not be made, and why."""
    info = await server_info(client)
    if info.skipped:
        # One line: the worker runs without these checks (they catch a misconfigured
        # server, the queue does not need them), and says so once at start-up.
        log.warning("Redis start-up check skipped: %s", info.skipped)
    if info.version is not None:
        _check_version(info.version, reliable=reliable)
    if info.maxmemory_policy not in (None, "noeviction"):
        log.warning(
            "Redis maxmemory-policy is %r: under memory pressure Redis will evict jobs. "
            "Set it to 'noeviction'.",
            info.maxmemory_policy,
        )
    return info


def _check_version(version: tuple[int, ...], *, reliable: bool) -> None:
    is_valkey = len(version) > 0 and version >= (7, 2)
    if reliable and not is_valkey and version < MIN_RELIABLE_VERSION:
        shown = ".".join(map(str, version))
        raise ConfigurationError(
            f"Redis {shown} is too old for reliable fetch (needs >= 6.2 for LMOVE/LPOS): "
            "upgrade Redis, or accept losing running jobs on a crash with fetch='basic'"
        )
