"""The worker's parts one at a time, on the test server (a Store in a fresh namespace),
with a ledger of their own and no Manager around them."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

import pytest

from cogworker_async.redis.connection import connect
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from cogworker_async.worker.ledger import Ledger

IDENTITY = "unit-host:1:abcdef"

S = TypeVar("S", bound=Store)


def raw_job(n: int, *, queue: str = "default", name: str = "app.job", **fields: object) -> bytes:
    """A stored job, as the client would have written it."""
    return json.dumps({"jid": f"j{n}", "class": name, "args": [n], "kwargs": {},
                       "queue": queue, "retry": True, "created_at": 1.0,
                       "enqueued_at": 1.0, **fields}).encode()


@pytest.fixture
def ledger() -> Ledger:
    return Ledger(slots=4, concurrency=4)


@pytest.fixture
async def unreachable(namespace: str) -> AsyncIterator[Store]:
    """A Store whose Redis refuses every connection (a port nobody listens on)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    s = Store.from_url(f"redis://127.0.0.1:{port}", namespace)
    yield s
    await s.aclose()


async def listed(store: Store, queue: str = "default") -> list[bytes]:
    """This test process's in-progress list for ``queue``, oldest first."""
    return list(reversed(await store.in_progress(IDENTITY, queue)))


async def put_in_progress(store: Store, *raws: bytes, queue: str = "default") -> None:
    """Jobs on this process's in-progress list for ``queue``, as a fetch leaves them."""
    await store.client.lpush(store.keys.in_progress(queue, IDENTITY), *raws)


@asynccontextmanager
async def store_of(cls: type[S], redis_url: str, namespace: str) -> AsyncIterator[S]:
    """A Store subclass (one that injects a race or a fault) on the test namespace, with
    connections of its own, closed after."""
    made = cls(connect(redis_url), Keys(namespace))
    try:
        yield made
    finally:
        await made.aclose()
