"""Clients from a URL, with redis-py's blind retries switched off, and the server check.

redis-py re-sends any command after a connection error or timeout by default. For a move
that is wrong: a lost reply to a fetch would move a *second* job onto the in-progress
list that nobody tracks, and a re-sent enqueue pushes the job twice. Every client here
has retries off; the worker retries knowing what each script does (they are idempotent
where it matters), and reconciles its own in-progress list after an uncertain reply.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.retry import Retry as SyncRetry

from cogworker_async.errors import ConfigurationError

log = logging.getLogger("cogworker_async")

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


def connect(url: str) -> redis.asyncio.Redis:
    """An async client for ``url`` (``redis://``, ``rediss://``, ``unix://``), retries off."""
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


def connect_sync(url: str) -> redis.Redis:
    """A blocking client for ``url``, retries off (for ``enqueue_sync``)."""
    return redis.Redis.from_url(
        url,
        retry=SyncRetry(NoBackoff(), 0),
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
        **DRIVER,
    )


@dataclass(frozen=True, slots=True)
class ServerInfo:
    version: tuple[int, ...]
    maxmemory_policy: str | None


def parse_version(text: str) -> tuple[int, ...]:
    """``"7.0.15"`` -> ``(7, 0, 15)``; unknown parts count as 0."""
    parts = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


async def server_info(client: redis.asyncio.Redis) -> ServerInfo:
    info = await client.info("server")
    # Valkey reports a frozen redis_version (7.2.4); either is new enough to compare.
    version = parse_version(str(info.get("valkey_version") or info.get("redis_version", "0")))
    try:
        policy = (await client.config_get("maxmemory-policy")).get("maxmemory-policy")
    except redis.exceptions.ResponseError:  # CONFIG refused (ACL, managed Redis)
        policy = None
    return ServerInfo(version=version, maxmemory_policy=policy)


async def check_server(client: redis.asyncio.Redis, *, reliable: bool) -> ServerInfo:
    """Refuse a server too old for reliable fetch; warn when it may evict jobs."""
    info = await server_info(client)
    is_valkey = len(info.version) > 0 and info.version >= (7, 2)
    if reliable and not is_valkey and info.version < MIN_RELIABLE_VERSION:
        shown = ".".join(map(str, info.version))
        raise ConfigurationError(
            f"Redis {shown} is too old for reliable fetch (needs >= 6.2 for LMOVE/LPOS): "
            "upgrade Redis, or accept losing running jobs on a crash with fetch='basic'"
        )
    if info.maxmemory_policy not in (None, "noeviction"):
        log.warning(
            "Redis maxmemory-policy is %r: under memory pressure Redis will evict jobs. "
            "Set it to 'noeviction'.",
            info.maxmemory_policy,
        )
    return info
