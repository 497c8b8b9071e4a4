"""The queue a stored job belongs on, one rule in two languages: ``job.queue_of`` (the
poller, an admin's retry, and through ``recovery.queue_of`` the reconciler's strays) and
``queue_of`` in requeue.lua (orphan recovery, shutdown). Both run over the same cases
here: a job must land on the same queue whichever of them moves it."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from cogworker_async import job
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from cogworker_async.worker.recovery import queue_of as queue_of_raw
from tests.lua.helpers import NOT_UTF8, items, make_job

OWNER = "stopping-host:7:f00"
FALLBACK = "fallback"

QUEUE_FIELDS: list[object] = [
    "default", "emails", "a", "UPPER", "0", "a:b.c-d_e", "q" * 128,  # valid names
    "q" * 129, "", " ", "a/b", "sp ace", "{tag}", "a\n", "\na", "tab\t", "a\x00b", "\x00",
    "é", "ǅ", "١٢", "ａ", "\ud800",  # not ASCII letters or digits (a lone surrogate too)
    None, 5, 5.0, True, ["emails"], {"name": "emails"},
]
NOT_OBJECTS: list[bytes] = [NOT_UTF8, b"not json {", b"[1, 2]", b'"emails"', b"null",
                            b"[" * 2_000 + b"]" * 2_000]


def raws() -> list[bytes]:
    """One raw job per case: each queue field, no queue field, a queue field given
    twice (the last one counts), and raws that are not JSON objects (the Lua side
    reads them with cjson, the Python side with json)."""
    jobs = [make_job(queue=field) for field in QUEUE_FIELDS]
    missing = json.loads(make_job())
    del missing["queue"]
    twice = b'{"jid": "j2", "class": "c", "queue": "bad name", "queue": "emails"}'
    return [*jobs, json.dumps(missing).encode(), twice, *NOT_OBJECTS]


def test_the_python_readers_agree() -> None:
    """The raw reader is the payload rule, applied to whatever the bytes decode to."""
    for raw in raws():
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep
            assert queue_of_raw(raw, FALLBACK) == FALLBACK
            continue
        if isinstance(payload, dict):
            assert queue_of_raw(raw, FALLBACK) == job.queue_of(payload, FALLBACK)
        else:
            assert queue_of_raw(raw, FALLBACK) == FALLBACK


async def test_requeue_lua_puts_each_job_where_job_queue_of_says(
    store: Store, keys: Keys
) -> None:
    cases = raws()
    expected: dict[str, set[bytes]] = defaultdict(set)
    for raw in cases:
        expected[queue_of_raw(raw, FALLBACK)].add(raw)
    assert set(expected) > {FALLBACK, "default", "q" * 128}  # valid names were kept
    await store.client.lpush(keys.in_progress(OWNER), *cases)

    assert await store.requeue(OWNER, FALLBACK) == len(cases)

    landed = {name: set(await items(store, keys.queue(name))) for name in expected}
    assert landed == expected
    known = {bytes(name).decode() for name in await store.client.smembers(keys.queues)}
    assert known == set(expected)


@pytest.mark.parametrize("payload", [None, {}, {"queue": 5}, {"queue": "bad name"}])
def test_a_payload_without_a_valid_queue_goes_to_the_fallback(payload: dict[str, object] | None
                                                              ) -> None:
    assert job.queue_of(payload, FALLBACK) == FALLBACK
