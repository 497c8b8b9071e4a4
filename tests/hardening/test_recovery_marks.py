"""Recovery never erases the mark that tells a paused process its jobs were taken.

The pass that takes a dead process's jobs sets its ``declared_dead`` mark; if that pass's
reply is lost (or burying its repeat orphans fails), it never reaches ``forget``. A later
pass then finds the list empty and forgets the identity: the mark must survive that, or
the paused process, on waking, would take the missing keys for a Redis restart, list its
jobs again and run them beside the recovered copies.
"""

from __future__ import annotations

from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings
from cogworker_async.worker.recovery import Recovery
from tests.lua.helpers import fetched, make_job

PAUSED = "paused-host:9:abc"


async def test_a_later_pass_keeps_the_mark_a_lost_reply_left(store: Store) -> None:
    await fetched(store, PAUSED, [make_job()])
    await store.client.sadd(store.keys.in_progress_identities, PAUSED)  # as its beats did
    await store.client.hset(store.keys.last_beat, PAUSED, "0")  # long dead, by Redis TIME
    # Pass 1 takes the job and sets the mark, but its reply is lost: no forget follows.
    taken = await store.recover(PAUSED, "default", dead_for=60.0, max_orphanings=3)
    assert taken is not None
    assert taken.moved == 1
    assert await store.client.sismember(store.keys.declared_dead, PAUSED)

    # Pass 2 finds the list empty and forgets the identity.
    recovery = Recovery(store, Settings(namespace=store.keys.namespace), "observer:1:x")
    assert PAUSED in await store.registered_identities()
    assert await recovery.recover_orphans() == 0
    assert PAUSED not in await store.registered_identities()  # forgotten

    assert await store.client.sismember(store.keys.declared_dead, PAUSED)
