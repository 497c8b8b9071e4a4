"""Batches when replies are lost (design.md, "Workflows: batches", the crash windows).

A fault proxy between the worker and its server lets chosen script calls run, then drops
their replies and closes the connection, so the worker cannot know whether they ran: a
member's ack (its note written, or not?), the relay's batch_apply and drop_notes, the
callback's enqueue and batch_fired. Each is run again by the worker or by the relay's
next pass; none may count a member twice, lose its end, or enqueue a callback twice.
"""

from __future__ import annotations

from collections.abc import Callable

import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.servers import ServerProcess
from tests.worker.chaos.redisfaults.conftest import (
    StartWorker,
    Witness,
    leftovers,
    report,
    wait_alive,
    wait_ready,
)
from tests.worker.chaos.redisfaults.faultapp import Jobs
from tests.worker.chaos.redisfaults.proxy import DropReply, LostReplyProxy
from tests.worker.chaos.redisfaults.test_lost_replies import proxied, sha

__all__ = ["proxied"]  # the fixture, shared with the lost-reply scenarios

MEMBERS = 4


async def test_lost_replies_of_a_batch_s_moves_count_once_and_call_once(
    proxied: tuple[ServerProcess, LostReplyProxy], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    server, proxy = proxied
    r, jobs, keys = clients(server.url), make_jobs(server.url), Keys(namespace)
    rules = {name: proxy.arm(DropReply(sha(name), times=times)) for name, times in (
        ("ack", 2), ("batch_apply", 1), ("drop_notes", 1), ("enqueue", 1),
        ("batch_fired", 1))}
    worker = start_worker(proxy.url, "--concurrency", "4", identity="fault-batch")
    await wait_ready(r, namespace, worker)
    tags = [f"member-{i}" for i in range(MEMBERS)]

    async with jobs.app.batch(on_complete=jobs.record.s("on-complete"),
                              on_success=jobs.record.s("on-success")) as batch:
        await jobs.record.enqueue_many([((tag,), {}) for tag in tags])

    async def settled() -> bool:
        status = await jobs.app.batch_status(batch.bid)
        relayed = not await r.zcard(keys.batches_firing) and not await r.llen(
            keys.batch_notes("default"))
        return (status.state == "success" and relayed and await witness.finished() == 6
                and not any((await leftovers(r, namespace)).values()))
    await wait_alive(worker, settled, timeout=30)

    starts = await witness.starts()
    status = await jobs.app.batch_status(batch.bid)
    report("batch-lost-replies", members=MEMBERS, runs=dict(starts),
           dropped={name: len(rule.dropped) for name, rule in rules.items()},
           requests={name: rule.requests for name, rule in rules.items()})
    assert {name: len(rule.dropped) for name, rule in rules.items()} == {
        "ack": 2, "batch_apply": 1, "drop_notes": 1, "enqueue": 1, "batch_fired": 1}
    assert starts == dict.fromkeys([*tags, "on-complete", "on-success"], 1)
    assert (status.total, status.succeeded, status.pending) == (MEMBERS, MEMBERS, 0)
    await worker.stop()


async def test_lost_replies_of_a_dependents_moves_release_it_once_after_its_parent(
    proxied: tuple[ServerProcess, LostReplyProxy], start_worker: StartWorker,
    make_jobs: Callable[[str], Jobs], clients: Callable[[str], redis.asyncio.Redis],
    witness: Witness, namespace: str,
) -> None:
    """The parent's ack (its note written, or not?), the relay's dep_apply (released, or
    not?) and drop_notes lose their replies: each job of parent -> child -> grandchild
    runs once, in that order, and nothing is left waiting."""
    server, proxy = proxied
    r, jobs, keys = clients(server.url), make_jobs(server.url), Keys(namespace)
    rules = {name: proxy.arm(DropReply(sha(name), times=times)) for name, times in (
        ("ack", 1), ("dep_apply", 2), ("drop_notes", 1))}
    parent = await jobs.record.enqueue("parent")
    assert parent is not None
    child = await jobs.record.options(after=[parent]).enqueue("child")
    assert child is not None
    await jobs.record.options(after=[child]).enqueue("grandchild")
    worker = start_worker(proxy.url, "--concurrency", "4", identity="fault-deps")
    await wait_ready(r, namespace, worker)

    async def settled() -> bool:
        return (await witness.finished() == 3 and not await r.zcard(keys.waiting("default"))
                and not await r.llen(keys.batch_notes("default"))
                and not any((await leftovers(r, namespace)).values()))
    await wait_alive(worker, settled, timeout=30)

    starts = await witness.starts()
    report("dependency-lost-replies", runs=dict(starts),
           dropped={name: len(rule.dropped) for name, rule in rules.items()})
    assert {name: len(rule.dropped) for name, rule in rules.items()} == {
        "ack": 1, "dep_apply": 2, "drop_notes": 1}
    assert starts == {"parent": 1, "child": 1, "grandchild": 1}
    assert [event["tag"] for event in await witness.started()] == ["parent", "child",
                                                                   "grandchild"]
    await worker.stop()
