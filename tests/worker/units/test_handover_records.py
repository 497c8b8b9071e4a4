"""The shutdown hand-over drops the jobs whose ack is still pending: one that keeps its
result, or was cancelled, is acked through the ack script first, so that its status
record says what became of it (the requeue's drop records a plain success)."""

from __future__ import annotations

from cogworker_async.jobs.status import CANCELLED, Ended
from cogworker_async.redis.store import Store
from cogworker_async.worker import handover
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.outcome import ACK, Ack
from cogworker_async.worker.settlement import Settler
from tests.redis.lua.helpers import fetched, jid_of, make_job

IDENTITY = "host:1:abc"
QUEUE = "default"


async def test_pending_acks_keep_their_result_and_their_cancel(store: Store) -> None:
    valued, cancelled, plain = make_job(), make_job(), make_job()
    await fetched(store, IDENTITY, [valued, cancelled, plain])
    ledger = Ledger(10, 10)
    ledger.remember(valued, Ack(Ended(result=b'{"n":1}', keep=60)), queue=QUEUE)
    ledger.remember(cancelled, Ack(CANCELLED), queue=QUEUE)
    ledger.remember(plain, ACK, queue=QUEUE)
    settler = Settler(store, IDENTITY, reliable=True, ledger=ledger)

    await handover.hand_over(store, settler, ledger, IDENTITY, [QUEUE])

    assert ledger.pending == {}
    assert await store.in_progress(IDENTITY, QUEUE) == []
    assert await store.client.llen(store.keys.queue(QUEUE)) == 0  # none run again
    states = {raw: await store.job_status(jid_of(raw), [QUEUE]) for raw in
              (valued, cancelled, plain)}
    assert states[valued] is not None
    assert (states[valued].state, states[valued].result) == ("succeeded", {"n": 1})
    assert 0 < await store.client.ttl(store.keys.record(QUEUE, jid_of(valued))) <= 60
    assert states[cancelled] is not None
    assert states[cancelled].state == "cancelled"
    assert states[plain] is not None
    assert states[plain].state == "succeeded"
