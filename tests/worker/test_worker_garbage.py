"""A worker fed garbage: whatever bytes sit on its queue, each is filed in dead (its exact
bytes kept when they are not a readable job), or runs if it is a valid job — and the
worker goes on to run the next good job.

Few examples: each one starts a worker in this process and waits for it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, Final, cast

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from cogworker_async import App
from cogworker_async.errors import UnparseablePayload
from cogworker_async.jobs import wire
from cogworker_async.redis.store import Store
from cogworker_async.settings import MAX_PAYLOAD_BYTES
from tests.hypothesis_profiles import examples
from tests.strategies import stored_bytes
from tests.waiting import wait_until
from tests.workbench import RECORD, Bench, build_bench, wipe

EXAMPLES: Final = examples(30)
SETTLE_TIMEOUT: Final = 10.0
"""Seconds a worker gets to file the garbage and run the good job behind it."""


@pytest.fixture
def bench(make_app: Callable[..., App]) -> Bench:
    return build_bench(make_app())


async def dead_entries(store: Store) -> list[dict[str, Any]]:
    members = cast("list[bytes]", await store.client.zrange(store.keys.dead("default"), 0, -1))
    return [json.loads(raw) for raw in members]


def readable(raw: bytes) -> dict[str, Any] | None:
    try:
        return cast("dict[str, Any]", wire.decode(raw, MAX_PAYLOAD_BYTES))
    except UnparseablePayload:
        return None


def assert_filed_or_ran(raw: bytes, dead: list[dict[str, Any]], bench: Bench) -> None:
    """Exactly one outcome for the garbage: it ran, or one dead entry stands for it."""
    payload = readable(raw)
    if payload is not None and payload["jid"] in bench.jids():
        assert payload["class"] == RECORD
        assert dead == []
        event("ran")
        return
    assert len(dead) == 1, dead
    entry = dead[0]
    if "raw_payload_base64" in entry:  # not a job, or not one JSON can write back
        assert base64.b64decode(entry["raw_payload_base64"]) == raw
        event(f"dead with its bytes: {entry['error_class']}")
        return
    assert payload is not None, f"unreadable bytes filed without them: {entry}"
    assert entry["error_class"] in ("UnknownJob", "InvalidArguments"), entry
    event(f"dead as read: {entry['error_class']}")
    assert {k: entry[k] for k in ("jid", "class", "args", "kwargs")} == {
        k: payload[k] for k in ("jid", "class", "args", "kwargs")}


@settings(max_examples=EXAMPLES)
@given(raw=stored_bytes(name=st.sampled_from([RECORD, "no.such.job", "os.system"])))
@example(raw=b"\xc3\x28\xa0\xa1\xff\xfe\x00")
@example(raw=b'{"jid": "r", "class": "prop.record", "args": [1e308, -0.0], "kwargs": {"": []}}')
@example(raw=b'{"jid": "g", "class": "prop.record", "args": [NaN]}')
@example(raw=b'{"jid": "g", "class": "\\ud800", "args": ["\\udfff"], "kwargs": {"\\udc80": 1}}')
async def test_garbage_is_filed_or_run_and_the_worker_goes_on(
        bench: Bench, store: Store, raw: bytes) -> None:
    await wipe(store)
    bench.received.clear()
    await store.client.lpush(store.keys.queue("default"), raw)  # fetched before the good job
    async with bench.app.worker(concurrency=1):
        good = await bench.record.enqueue("after the garbage")
        await wait_until(lambda: good in bench.jids(), timeout=SETTLE_TIMEOUT)
    assert_filed_or_ran(raw, await dead_entries(store), bench)
    assert await store.client.llen(store.keys.queue("default")) == 0



async def test_a_job_whose_jid_holds_a_lone_surrogate_goes_to_dead_with_its_bytes(
        bench: Bench, store: Store) -> None:
    """No key name can hold such a jid (its ack would fail on every try): the job is
    filed in dead, byte for byte, and the worker goes on."""
    raw = b'{"jid": "\\ud800", "class": "%s"}' % RECORD.encode()
    await store.client.lpush(store.keys.queue("default"), raw)
    async with bench.app.worker(concurrency=1):
        good = await bench.record.enqueue("after the garbage")
        await wait_until(lambda: good in bench.jids(), timeout=SETTLE_TIMEOUT)
    assert bench.jids() == [good]
    [entry] = await dead_entries(store)
    assert base64.b64decode(entry["raw_payload_base64"]) == raw
    in_progress = [key async for key in store.client.scan_iter(
        match=store.keys.in_progress_pattern)]
    assert [await store.client.llen(key) for key in in_progress] == [0] * len(in_progress)
