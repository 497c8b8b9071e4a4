"""Small helpers shared by the Lua script tests: realistic raw jobs and views of Redis."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any, cast

import redis

from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.scripts import source
from cogworker_async.redis.store import Store

# Bytes that are not UTF-8 (a lone continuation byte, an invalid lead byte): a job like
# this must still be found and moved byte for byte, never decoded on the way.
NOT_UTF8 = b'\xff\xfe{"jid": "\x80\xc3(", "queue": "default"}'


def make_job(queue: object = "default", *, jid: str | None = None, **extra: Any) -> bytes:
    """A realistic raw job, as the client would store it."""
    payload = {
        "jid": jid or uuid.uuid4().hex[:24],
        "class": "send_email",
        "args": ["a@example.com"],
        "kwargs": {"subject": "hello"},
        "queue": queue,
        "retry": True,
        "created_at": 1_700_000_000.0,
        "enqueued_at": 1_700_000_000.0,
        **extra,
    }
    return json.dumps(payload).encode()


async def fetched(store: Store, identity: str, jobs: Sequence[bytes], queue: str = "default"
                  ) -> list[bytes]:
    """Enqueue ``jobs`` and fetch them all onto ``identity``'s in-progress list."""
    await store.enqueue(queue, jobs)
    result = await store.fetch(identity, [queue], len(jobs))
    assert [raw for _, raw in result.jobs] == list(jobs)
    return list(jobs)


def jid_of(raw: bytes) -> str:
    jid = json.loads(raw)["jid"]
    assert isinstance(jid, str)
    return jid


async def redis_now(store: Store) -> float:
    """Redis' clock (TIME), in epoch seconds: the clock the scripts judge by."""
    seconds, micros = await store.client.time()
    return seconds + micros / 1_000_000


async def items(store: Store, key: str) -> list[bytes]:
    """A list key's entries, head (left) first."""
    return [as_bytes(x) for x in await store.client.lrange(key, 0, -1)]


async def scored(store: Store, key: str) -> list[tuple[bytes, float]]:
    """A zset key's ``(member, score)`` pairs, lowest score first."""
    pairs = await store.client.zrange(key, 0, -1, withscores=True)
    return [(as_bytes(m), float(s)) for m, s in cast(list[tuple[bytes, float]], pairs)]


async def plant_wrong_type(store: Store, key: str) -> None:
    """Make ``key`` a hash, the wrong type for every list, set and zset the scripts use."""
    await store.client.hset(key, "planted", "by a test")


async def still_planted(store: Store, key: str) -> bool:
    return await store.client.hgetall(key) == {b"planted": b"by a test"}


async def run_raw(store: Store, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """Run a script with arguments the Store would never pass (e.g. a wrong caller clock)."""
    return await store.client.eval(source(name), len(keys), *keys, *args)


async def stored_record(client: Any, keys: Any, queue: str, jid: str) -> dict[str, str]:
    """The fields of a job's status record wherever it lives (its field of the queue's
    live hash, else its key: ``lua/_record.lua``), without the live record's bound."""
    from cogworker_async.jobs.status import unpack
    try:
        live = await client.hget(keys.live_records(queue), jid)
    except redis.ResponseError:  # a live hash of the wrong type (a test plants one)
        live = None
    if live is not None:
        fields = unpack(live)
        fields.pop("until", None)
        return fields
    key = keys.record(queue, jid)
    if await client.type(key) == b"string":  # finished: packed, as a live one
        return unpack(await client.get(key))
    flat = await client.hgetall(key)  # as earlier builds wrote it
    return {as_bytes(k).decode(): as_bytes(v).decode() for k, v in flat.items()}


async def record_ttl(client: Any, keys: Any, queue: str, jid: str) -> int:
    """Seconds a job's status record is kept: a live record's bound less Redis' clock,
    a finished one's TTL (-2: no record, -1: no bound)."""
    from cogworker_async.jobs.status import unpack
    try:
        live = await client.hget(keys.live_records(queue), jid)
    except redis.ResponseError:
        live = None
    if live is not None:
        bound = unpack(live).get("until")
        if bound is None:
            return -1
        seconds, micros = await client.time()
        return int(float(bound) - (seconds + micros / 1e6))
    return int(await client.ttl(keys.record(queue, jid)))
