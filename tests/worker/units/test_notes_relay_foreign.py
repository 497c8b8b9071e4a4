"""NotesRelay beside a co-tenant's key where every batch needs one of ours (issue 40).

A firing set (or open index) of another type is no batch's own damage: applying any
member's end is refused naming it, before anything is written; the notes are kept (not
dropped as a damaged batch's are) and applied once the key is deleted; the relay's log
line names the key. (The open of a new batch is refused too: tests/redis/lua/
test_batches.py.)
"""

from __future__ import annotations

import logging

import anyio
import pytest

from cogworker_async.errors import WrongTypeKey
from cogworker_async.redis.store import Store
from cogworker_async.worker.notes_relay import NotesRelay
from tests.redis.lua.helpers import jid_of, make_job
from tests.waiting import wait_until

IDENTITY = "host:1:abc"
QUEUE = "default"


async def ended_member(store: Store, bid: str) -> str:
    """A member of open-then-sealed batch ``bid`` that ran and was acked: its note waits."""
    await store.batches.open(bid)
    raw = make_job(QUEUE, bid=bid)
    await store.batches.add(bid, [jid_of(raw)])
    await store.batches.seal(bid)
    await store.enqueue(QUEUE, [raw], batch=bid)
    await store.fetch(IDENTITY, [QUEUE], 1)
    await store.ack(IDENTITY, QUEUE, [(raw, jid_of(raw))])
    return jid_of(raw)


@pytest.mark.parametrize("which", ["batches_firing", "batches_open"])
async def test_a_firing_set_or_open_index_of_another_type_keeps_every_note_and_names_the_key(
    store: Store, which: str, caplog: pytest.LogCaptureFixture,
) -> None:
    member = await ended_member(store, "b")
    key = getattr(store.keys, which)
    await store.client.delete(key)
    await store.client.set(key, "a co-tenant's")
    with pytest.raises(WrongTypeKey) as refused:
        await store.batches.apply("b", [(member, "succeeded")])
    assert refused.value.key == key
    assert (await store.batches.read("b")).pending == 1  # type: ignore[union-attr]

    relay = NotesRelay(store, {}, [QUEUE], interval=0.05)
    with caplog.at_level(logging.WARNING):
        async with anyio.create_task_group() as tg:  # the relay as a worker runs it
            tg.start_soon(relay.run)
            await wait_until(lambda: key in caplog.text, timeout=10)
            tg.cancel_scope.cancel()
    assert await store.client.llen(store.keys.batch_notes(QUEUE)) == 1  # kept
    line = next(r for r in caplog.records if key in r.getMessage())
    assert line.exc_info is None  # a co-tenant's key, said in one line: no traceback

    await store.client.delete(key)  # the co-tenant's key deleted: the batch goes on
    assert await relay.relay_once() == 1
    record = await store.batches.read("b")
    assert record is not None
    assert (record.succeeded, record.fields["state"]) == (1, "success")


async def test_a_firing_set_of_another_type_is_named_by_the_relays_reading_of_it(
    store: Store,
) -> None:
    await store.client.set(store.keys.batches_firing, "a co-tenant's")
    with pytest.raises(WrongTypeKey) as refused:
        await store.batches.firing()
    assert refused.value.key == store.keys.batches_firing
