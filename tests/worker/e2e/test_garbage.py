"""Garbage planted in a queue goes to dead (bytes kept when unreadable); the worker goes on.

Nothing in a payload can make the worker import or call what is not registered
(``"class": "os.system"`` must not run a shell), and no payload, however malformed,
deeply nested or not even UTF-8, stops the worker or a good job behind it.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import redis.asyncio

from cogworker_async.redis.keys import Keys
from cogworker_async.settings import MAX_PAYLOAD_BYTES
from tests.worker.e2e.conftest import (
    StartWorker,
    counter,
    in_progress,
    ran,
    wait_ready,
    wait_while_alive,
    zset_entries,
)
from tests.worker.e2e.jobsapp import Jobs

DEPTH = 100_000


def _job(jid: str, cls: str, args: list[Any], kwargs: dict[str, Any] | None = None,
         **extra: Any) -> bytes:
    payload = {"jid": jid, "class": cls, "args": args, "kwargs": kwargs or {},
               "queue": "default", "retry": True, "created_at": 1.0, "enqueued_at": 1.0}
    return json.dumps({**payload, **extra}).encode()


def unreadable() -> list[bytes]:
    """Payloads that are not a job at all: dead with their exact bytes in base64."""
    return [
        b"not json at all",
        b"",
        b"null",
        b"42",
        b"[1, 2, 3]",  # a JSON array
        b'{"jid": "g-noclass", "args": [], "kwargs": {}}',  # an object with no "class"
        b'{"jid": 7, "class": "record", "args": ["x"]}',  # jid not a string
        b'{"jid": "g-args", "class": "record", "args": "x"}',  # args not a list
        b"[" * DEPTH + b"]" * DEPTH,  # RecursionError in the parser
        b'{"jid": "g-utf8", "class": "record", "args": ["\xff\xfe\xc3("]}',  # invalid UTF-8
        b"\xc3\x28\xa0\xa1\xff\xfe\x00",  # binary junk
        _job("g-big", "record", ["x" * (MAX_PAYLOAD_BYTES + 1)]),  # over max_payload_bytes
    ]


def refused(pwned: Path) -> dict[str, tuple[bytes, str]]:
    """Readable jobs that must not run: jid -> (raw, error_class of their dead entry)."""
    return {
        "g-unknown": (_job("g-unknown", "no.such.job", []), "UnknownJob"),
        "g-os": (_job("g-os", "os.system", [f"touch {pwned}"]), "UnknownJob"),
        "g-count": (_job("g-count", "record", ["a", "b", "c"]), "InvalidArguments"),
        "g-kwarg": (_job("g-kwarg", "record", ["a"], {"nope": 1}), "InvalidArguments"),
        "g-missing": (_job("g-missing", "add", [1]), "InvalidArguments"),
        # Types fit the signature but not the job: it fails when run, retried like any
        # failure (once, here), then dead.
        "g-types": (_job("g-types", "add", ["x", None], retry=1), "TypeError"),
    }


def unwritable() -> dict[bytes, str]:
    """Jobs Python's parser reads but JSON cannot write back (NaN, 1e999 = inf): dead with
    their exact bytes, under their jid and the error that refused them. raw -> error_class.
    (These used to stop the worker: encoding their dead entry raised in the settle.)"""
    return {
        b'{"jid": "g-nan", "class": "no.such.job", "args": [NaN]}': "UnknownJob",
        b'{"jid": "g-inf", "class": "add", "args": [1e999, 1], "retry": 3}': "TypeError",
        b'{"jid": "g-neg", "class": "record", "args": [1, -Infinity]}': "InvalidArguments",
    }


async def test_garbage_goes_to_dead_and_the_worker_keeps_working(
    jobs: Jobs, r: redis.asyncio.Redis, namespace: str, start_worker: StartWorker
) -> None:
    queue = Keys(namespace).queue("default")
    pwned = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    bad = refused(pwned)
    garbage = unreadable() + list(unwritable()) + [raw for raw, _ in bad.values()]
    good: list[str] = []
    for i, raw in enumerate(garbage):  # interleaved: good, garbage, good, garbage, ...
        good.append(f"good-{i}")
        await jobs.record.enqueue(good[-1])
        await r.lpush(queue, raw)
    good.append("good-last")
    await jobs.record.enqueue("good-last")

    worker = start_worker()
    await wait_ready(r, namespace, worker)
    await wait_while_alive(worker, lambda: _settled(r, namespace, len(garbage), len(good)),
                           timeout=15)

    dead = await zset_entries(r, Keys(namespace).dead("default"))
    assert len(dead) == len(garbage)
    kept = Counter((base64.b64decode(e["raw_payload_base64"]), e["error_class"])
                   for e in dead if "raw_payload_base64" in e)
    assert kept == Counter([  # each one, byte for byte
        *((raw, "UnparseablePayload") for raw in unreadable()),
        *unwritable().items(),
    ])
    by_bytes = {e["jid"]: e for e in dead if e["error_class"] != "UnparseablePayload"
                and "raw_payload_base64" in e}
    assert set(by_bytes) == {"g-nan", "g-inf", "g-neg"}
    assert all("could not be written as JSON" in e["error_message"] for e in by_bytes.values())
    filed = {e["jid"]: e for e in dead if "raw_payload_base64" not in e}
    assert {jid: e["error_class"] for jid, e in filed.items()} == {
        jid: error_class for jid, (_, error_class) in bad.items()
    }
    assert filed["g-os"]["args"] == [f"touch {pwned}"]
    assert filed["g-types"]["retry_count"] == 1  # ran twice (retry=1), then dead
    assert not pwned.exists()
    assert Counter(await ran(r, namespace)) == Counter(good)  # good jobs once, nothing else

    # Still alive and working: a good job and more garbage, planted while it runs.
    await r.lpush(queue, b"\x00more junk")
    await jobs.record.enqueue("after")
    await wait_while_alive(worker, lambda: _settled(r, namespace, len(garbage) + 1, len(good) + 1),
                           timeout=10)
    assert Counter(await ran(r, namespace)) == Counter([*good, "after"])

    await worker.stop()  # flushes the stats
    # Each garbage entry failed once; g-types twice (its retry). Then the late junk.
    assert await counter(r, Keys(namespace).stats_failed) == len(garbage) + 1 + 1
    assert await r.llen(queue) == 0
    assert await r.zcard(Keys(namespace).retry("default")) == 0
    assert await in_progress(r, namespace) == []
    assert not pwned.exists()


async def _settled(r: redis.asyncio.Redis, namespace: str, dead: int, good: int) -> bool:
    return (int(await r.zcard(Keys(namespace).dead("default"))) >= dead
            and len(await ran(r, namespace)) >= good)
