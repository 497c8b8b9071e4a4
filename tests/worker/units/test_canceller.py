"""The canceller cancels a run only when its record still asks for it: an entry left in
a process's cancel set by a run that ended first never stops a later run of the jid."""

from __future__ import annotations

from cogworker_async.jobs.context import RunControl
from cogworker_async.redis.store import Store
from cogworker_async.worker.canceller import Canceller
from tests.redis.lua.helpers import jid_of, make_job

IDENTITY = "host:1:abc"
QUEUE = "default"


async def _run(store: Store, raw: bytes) -> RunControl:
    await store.enqueue(QUEUE, [raw], chosen=True)
    fetched = await store.fetch(IDENTITY, [QUEUE], 1)
    assert [job for _, job in fetched.jobs] == [raw]
    return RunControl(QUEUE, jid_of(raw))


async def test_a_stale_cancel_entry_never_stops_a_later_run(store: Store) -> None:
    raw = make_job(jid="order-7")
    await _run(store, raw)
    assert await store.cancel_job(QUEUE, "order-7") == "stopping"
    await store.ack(IDENTITY, QUEUE, [(raw, "order-7")])  # it ended before the poll

    again = make_job(jid="order-7", args=["second"])
    control = await _run(store, again)  # the caller enqueues the jid once more
    canceller = Canceller(store, IDENTITY, [QUEUE])
    canceller.start(control)
    await canceller.tick()
    assert not control.cancel_requested

    assert await store.cancel_job(QUEUE, "order-7") == "stopping"  # asked for this run
    await canceller.tick()
    assert control.cancel_requested
