"""Recovery never erases the mark that tells a paused process its jobs were taken.

The pass that takes a dead process's jobs sets its ``declared_dead`` mark in the slot of
each queue it took jobs from; if that pass's reply is lost (or burying its repeat
orphans fails), it never reaches ``forget``. A later pass then finds the lists empty and
forgets the identity: the marks must survive that, in every queue's slot, or the paused
process, on waking, would take the missing keys for a Redis restart, list its jobs again
and run them beside the recovered copies.
"""

from __future__ import annotations

from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings
from cogworker_async.worker.recovery import Recovery
from tests.redis.lua.helpers import fetched, make_job

PAUSED = "paused-host:9:abc"
QUEUES = ["default", "mail"]


async def test_a_later_pass_keeps_the_marks_a_lost_reply_left(store: Store) -> None:
    keys = store.keys
    # As its beats did: registered in the namespace's slot and in each queue's.
    await store.client.sadd(keys.processes, PAUSED)
    await store.client.hset(keys.last_beat, PAUSED, "0")  # long dead, by Redis TIME
    for queue in QUEUES:
        await fetched(store, PAUSED, [make_job(queue)], queue)
        await store.client.sadd(keys.queue_identities(queue), PAUSED)
        await store.client.hset(keys.queue_last_beat(queue), PAUSED, "0")
    # Pass 1 takes the jobs and sets the marks, but its reply is lost: no forget follows.
    for queue in QUEUES:
        taken = await store.recover(PAUSED, queue, dead_for=60.0, max_orphanings=3)
        assert taken is not None
        assert taken.moved == 1
        assert await store.client.sismember(keys.queue_declared_dead(queue), PAUSED)

    # Pass 2 finds the lists empty and forgets the identity, in every slot.
    recovery = Recovery(store, Settings(namespace=keys.namespace), "observer:1:x")
    assert PAUSED in await store.registered_identities()
    assert await recovery.recover_orphans() == 0
    assert PAUSED not in await store.registered_identities()  # forgotten
    for queue in QUEUES:
        assert PAUSED not in await store.queue_identities(queue)

    for queue in QUEUES:
        assert await store.client.sismember(keys.queue_declared_dead(queue), PAUSED)
