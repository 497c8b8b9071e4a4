"""NotesRelay on its own, on real servers: which failures drop a note and which keep it.

A note is dropped, said in the log, only when its batch's (or its dependent's) keys
are of another type than the script's, which no retry mends; any other refusal — here
an ACL that refuses the batch's keys, as a cluster that is down or moving a slot refuses
with an error reply too — keeps it, and the next pass applies it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from cogworker_async.worker.notes_relay import NotesRelay
from tests.redis.lua.helpers import jid_of, make_job
from tests.servers import ServerProcess

IDENTITY = "host:1:abc"
QUEUE = "default"
NAMESPACE = "relay"


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    started = ServerProcess().start()
    yield started
    started.cleanup()


@pytest.fixture
async def admin(server: ServerProcess) -> AsyncIterator[Store]:
    store = Store.from_url(server.url, NAMESPACE)
    yield store
    await store.aclose()


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


async def test_a_refused_batch_keeps_its_note_until_a_pass_can_apply_it(
    server: ServerProcess, admin: Store,
) -> None:
    await ended_member(admin, "b1")
    keys = Keys(NAMESPACE)
    # A relay whose user may touch the queue's keys but not the namespace's (the batch's).
    await admin.client.execute_command(
        "ACL", "SETUSER", "relay", "on", ">pw", "+@all", f"~{NAMESPACE}:{{{QUEUE}}}:*",
        "&*")
    refused = Store.from_url(server.url.replace("redis://", "redis://relay:pw@"), NAMESPACE)
    try:
        relay = NotesRelay(refused, {}, [QUEUE])
        with pytest.raises(Exception, match="no permissions"):
            await relay.relay_once()
        assert await admin.client.llen(keys.batch_notes(QUEUE)) == 1  # kept
        assert (await admin.batches.read("b1")).succeeded == 0  # type: ignore[union-attr]
    finally:
        await refused.aclose()
    assert await NotesRelay(admin, {}, [QUEUE]).relay_once() == 1
    assert await admin.client.llen(keys.batch_notes(QUEUE)) == 0
    record = await admin.batches.read("b1")
    assert record is not None
    assert (record.succeeded, record.fields["state"]) == (1, "success")


async def test_a_batch_of_the_wrong_type_drops_its_note_and_not_the_others(
    admin: Store, caplog: pytest.LogCaptureFixture,
) -> None:
    await ended_member(admin, "good")
    await ended_member(admin, "bad")
    keys = Keys(NAMESPACE)
    await admin.client.delete(keys.batch_set("bad", "pending"))
    await admin.client.set(keys.batch_set("bad", "pending"), "not a set")
    assert await NotesRelay(admin, {}, [QUEUE]).relay_once() == 2
    assert await admin.client.llen(keys.batch_notes(QUEUE)) == 0
    good = await admin.batches.read("good")
    assert good is not None
    assert good.fields["state"] == "success"
    assert "batch bad cannot take its members' ends" in caplog.text
