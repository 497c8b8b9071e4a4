"""debounce.lua and coalesce.lua merge a new job into the key's waiting one by writing the
waiting job's jid where the new payload has its own (``dedup.placed``'s offset), whatever
fields come before it; an offset that does not point at the new jid is refused, nothing
written."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from redis.exceptions import ResponseError

from cogworker_async import dedup
from cogworker_async import job as job_module
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import items, scored

QUEUE = "default"


def fronted(value: Any) -> tuple[bytes, str, int]:
    """A raw job whose client middleware wrote a field before the jid, holding a ``jid``
    of its own: (raw, its jid, the bytes before its jid)."""
    payload = job_module.build("note", ["k", value], {}, queue=QUEUE, retry=True,
                               now=time.time())
    jid = payload["jid"]
    raw = json.dumps({"trace": {"jid": "t-" + jid}, **payload},
                     separators=(",", ":")).encode()
    placed, at = dedup.placed(raw, jid)
    return placed, jid, at


def read(raw: bytes) -> tuple[str, Any, str]:
    payload = json.loads(raw)
    return payload["jid"], payload["args"][1], payload["trace"]["jid"]


async def test_debounce_writes_the_waiting_jid_where_the_payload_has_its_own(
    store: Store, keys: Keys
) -> None:
    (first, first_jid, first_at), (second, second_jid, second_at) = fronted(1), fronted(2)
    assert first_at > 8

    await store.dedup.debounce("d", first_jid, 30, QUEUE, first, name="note",
                               jid_at=first_at)
    made, runs = await store.dedup.debounce("d", second_jid, 30, QUEUE, second, name="note",
                                            jid_at=second_at)

    assert (made, runs) == (False, first_jid)
    [(member, _)] = await scored(store, keys.schedule(QUEUE))
    assert read(member) == (first_jid, 2, "t-" + second_jid)


async def test_coalesce_writes_the_waiting_jid_where_the_payload_has_its_own(
    store: Store, keys: Keys
) -> None:
    (first, first_jid, first_at), (second, second_jid, second_at) = fronted(1), fronted(2)

    await store.dedup.coalesce("c", first_jid, QUEUE, first, name="note", jid_at=first_at)
    how, runs = await store.dedup.coalesce("c", second_jid, QUEUE, second, name="note",
                                           jid_at=second_at)

    assert (how, runs) == ("merged", first_jid)
    [(_, fetched)] = (await store.fetch("host:1:me", [QUEUE], 1)).jobs
    assert read(fetched) == (first_jid, 2, "t-" + second_jid)


@pytest.mark.parametrize("mode", ["debounce", "coalesce"])
async def test_an_offset_that_misses_the_jid_is_refused_writing_nothing(
    store: Store, keys: Keys, mode: str
) -> None:
    raw, jid, at = fronted(1)
    with pytest.raises(ResponseError, match="jid is not at byte"):
        await push(store, mode, raw, jid, at - 1)
    assert await scored(store, keys.schedule(QUEUE)) == []
    assert await items(store, keys.queue(QUEUE)) == []


async def push(store: Store, mode: str, raw: bytes, jid: str, at: int) -> object:
    if mode == "debounce":
        return await store.dedup.debounce("d", jid, 30, QUEUE, raw, name="note", jid_at=at)
    return await store.dedup.coalesce("c", jid, QUEUE, raw, name="note", jid_at=at)


def test_placed_finds_the_top_level_jid_not_a_nested_one() -> None:
    raw, jid, at = fronted(1)
    assert raw[at:at + len(jid)] == jid.encode()
    assert json.loads(raw)["trace"]["jid"] == "t-" + jid
    plain = job_module.encode_new(job_module.build("note", [], {}, queue=QUEUE, retry=True,
                                                   now=1.0), job_module.NO_SIZE_LIMIT)
    assert dedup.placed(plain, json.loads(plain)["jid"]) == (plain, 8)
    with pytest.raises(ValueError, match="plain text"):
        dedup.placed(b'{"jid":"a\\"b"}', 'a"b')
