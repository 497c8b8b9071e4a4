"""Plain clients for tests, on one server or a cluster alike (chosen by the URL).

Tests plant and inspect keys with these. On a cluster a plain ``redis.asyncio.Redis``
would get MOVED for most keys; the cluster client routes each command to its slot.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
import redis.cluster

from cogworker_async.redis import urls
from cogworker_async.redis.cluster import ClusterClient


def is_cluster_url(url: str) -> bool:
    return urls.scheme_of(url) in urls.CLUSTER_SCHEMES


def async_client(url: str, **kwargs: Any) -> redis.asyncio.Redis:
    """An async client for ``url`` (``redis://`` or ``redis+cluster://``)."""
    if is_cluster_url(url):  # the product's own (redis-py's fails under concurrency)
        return ClusterClient(urls.cluster_url(url).nodes, **kwargs)
    return redis.asyncio.Redis.from_url(url, **kwargs)


def sync_client(url: str, **kwargs: Any) -> redis.Redis:
    """A blocking client for ``url`` (``redis://`` or ``redis+cluster://``)."""
    if is_cluster_url(url):
        parsed = urls.cluster_url(url)
        nodes = [redis.cluster.ClusterNode(host, port)  # type: ignore[no-untyped-call]
                 for host, port in parsed.nodes]
        cluster = redis.cluster.RedisCluster(startup_nodes=nodes, **kwargs)
        return cluster  # type: ignore[return-value]
    return redis.Redis.from_url(url, **kwargs)


async def subscribers(client: redis.asyncio.Redis, channel: str) -> int:
    """Subscribers of ``channel`` on every node (a cluster's PUBSUB NUMSUB counts the
    node it is asked on only)."""
    if isinstance(client, ClusterClient):
        await client.initialize()
        total = 0
        for address in client.get_primaries():
            ((_, count),) = await client.node(address).pubsub_numsub(channel)
            total += int(count)
        return total
    ((_, count),) = await client.pubsub_numsub(channel)
    return int(count)
