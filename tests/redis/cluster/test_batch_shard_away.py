"""One shard away (issue 40, defect 3): a batch whose callback's queue lives on the
shard that is down stops only itself. The callbacks of the batches whose queues live on
the healthy shards are enqueued, the members' ends on the healthy shards relayed; the
batch held up is put off and tried again, and the pass says the node away (for the
relay's streak) without stopping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cogworker_async import App
from cogworker_async.redis.errors import ConnectionLost
from cogworker_async.redis.keys import Keys
from cogworker_async.worker.notes_relay import NotesRelay
from tests.cluster_harness import ClusterProcess
from tests.redis.cluster.test_shard_away import pick_queues

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def own_cluster() -> Iterator[ClusterProcess]:
    # The killed node is never marked failed: the cluster keeps serving the others.
    with ClusterProcess(replicas=0, node_timeout_ms=60_000) as cluster:
        yield cluster


async def test_a_shard_away_holds_up_only_the_batches_whose_callbacks_live_there(
    own_cluster: ClusterProcess, namespace: str,
) -> None:
    keys = Keys(namespace)
    healthy, away, away_port = pick_queues(own_cluster, keys)
    app = App(own_cluster.url, namespace=namespace, track_jobs=True)

    @app.job(name="on_away", queue=away)
    async def on_away(tag: str) -> None: ...

    @app.job(name="on_healthy", queue=healthy)
    async def on_healthy(tag: str) -> None: ...

    @app.job(name="member", queue=healthy)
    async def member(n: int) -> None: ...

    store = app._store()
    try:
        bids = []
        for callback in (on_away, on_away, on_healthy):  # the held-up ones due first
            async with app.batch(on_complete=callback.s("done")) as batch:
                pass
            bids.append(batch.bid)
        async with app.batch(on_complete=on_healthy.s("after its member")) as with_member:
            jid = await member.enqueue_in(3600, 1)
        assert jid is not None
        assert await app.cancel(jid) == "cancelled"  # its end: a note on the healthy shard
        own_cluster.kill_master_of_slot(own_cluster.slot_of(keys.queue(away)))

        relay = NotesRelay(store, app.registry, [healthy, away], identity="relay")
        with pytest.raises(ConnectionLost):  # said, for the streak: not stopping the pass
            await relay.relay_once()

        queued = await store.client.lrange(keys.queue(healthy), 0, -1)
        assert len(queued) == 2, queued
        assert any(f"{bids[2]}-complete".encode() in raw for raw in queued)
        assert any(f"{with_member.bid}-complete".encode() in raw for raw in queued)
        assert (await app.batch_status(with_member.bid)).state == "complete"
        # The two held up wait, put off (not read again at once).
        assert await store.batches.firing() == []
        firing = await store.client.zrange(keys.batches_firing, 0, -1)
        assert sorted(firing) == sorted(bid.encode() for bid in bids[:2])
    finally:
        await app.close()
    assert away_port not in own_cluster.ports
