"""Reconciler on its own: this process's lists (one per queue it serves) kept in line
with its ledger — strays requeued after two passes and not one, each onto the queue whose
list held it, running and pending jobs left alone, pending outcomes settled late and not
run again."""

from __future__ import annotations

import logging

import pytest

from cogworker_async.redis.errors import RedisError
from cogworker_async.redis.store import Store
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.outcome import Ack, Filing
from cogworker_async.worker.reconcile import Reconciler
from cogworker_async.worker.recovery import UNTRIED, attempt
from cogworker_async.worker.settlement import Settler
from cogworker_async.worker.streak import Streak
from tests.worker.units.conftest import IDENTITY, listed, put_in_progress, raw_job

QUEUES = ["default", "mail", "critical"]


def reconciler(store: Store, ledger: Ledger) -> Reconciler:
    settler = Settler(store, IDENTITY, reliable=True, ledger=ledger)
    return Reconciler(store, settler, IDENTITY, QUEUES, ledger)


async def test_a_stray_is_requeued_after_two_passes_not_one(store: Store,
                                                            ledger: Ledger) -> None:
    ghost = raw_job(1, queue="mail")
    await put_in_progress(store, ghost, queue="mail")
    passes = reconciler(store, ledger)
    assert await passes.reconcile() == 0
    assert await listed(store, "mail") == [ghost]
    assert await passes.reconcile() == 1
    assert await listed(store, "mail") == []
    assert await store.client.lrange(store.keys.queue("mail"), 0, -1) == [ghost]


async def test_a_stray_goes_back_to_the_queue_whose_list_held_it(store: Store,
                                                                 ledger: Ledger) -> None:
    """Whatever its payload's queue field says (unreadable here): the list it was on is
    in its queue's slot, and the requeue stays in that slot."""
    ghost = raw_job(1, queue="no spaces allowed")
    await put_in_progress(store, ghost, queue="critical")
    passes = reconciler(store, ledger)
    await passes.reconcile()
    assert await passes.reconcile() == 1
    assert await store.client.lrange(store.keys.queue("critical"), 0, -1) == [ghost]
    assert await store.client.llen(store.keys.queue("default")) == 0


async def test_running_jobs_are_never_requeued(store: Store, ledger: Ledger) -> None:
    running = Work("default", raw_job(1))
    await put_in_progress(store, running.raw)
    ledger.admit(running)
    passes = reconciler(store, ledger)
    assert [await passes.reconcile() for _ in range(3)] == [0, 0, 0]
    assert await listed(store) == [running.raw]


async def test_nothing_is_requeued_while_a_fetch_is_in_flight(store: Store,
                                                              ledger: Ledger) -> None:
    """Its jobs are listed but not yet admitted. Such a pass asked Redis nothing: it says
    so (None), and is no sign that Redis is reachable."""
    fetched = raw_job(1)
    await put_in_progress(store, fetched)
    passes = reconciler(store, ledger)
    ledger.fetch_began()
    assert [await passes.reconcile() for _ in range(3)] == [None, None, None]
    assert await listed(store) == [fetched]


async def test_a_pass_that_asked_redis_nothing_does_not_end_an_outage(
    unreachable: Store, store: Store, ledger: Ledger, caplog: pytest.LogCaptureFixture,
) -> None:
    """Failed, then a pass with nothing to ask (a fetch in flight), then failed again:
    one outage, one "failed" line; the first pass that reaches Redis ends it."""
    streak = Streak("reconcile pass")
    caplog.set_level(logging.INFO, logger="cogworker_async")

    async def step(passes: Reconciler) -> object:
        return UNTRIED if await passes.reconcile() is None else None

    assert not await attempt(lambda: step(reconciler(unreachable, ledger)), streak)
    ledger.fetch_began()
    assert await attempt(lambda: step(reconciler(unreachable, ledger)), streak)
    assert streak.failing
    ledger.fetch_ended()
    assert not await attempt(lambda: step(reconciler(unreachable, ledger)), streak)
    assert await attempt(lambda: step(reconciler(store, ledger)), streak)
    lines = [r.getMessage() for r in caplog.records if getattr(r, "streak", None)]
    assert [line.split()[2] for line in lines] == ["failed", "recovered"], lines


async def test_pending_outcomes_are_settled_late_and_not_run_again(
    store: Store, ledger: Ledger
) -> None:
    acked, failed = raw_job(1), raw_job(2, queue="mail")
    await put_in_progress(store, acked)
    await put_in_progress(store, failed, queue="mail")
    ledger.remember(acked, Ack(), queue="default")
    ledger.remember(failed, Filing("dead", {"jid": "j2", "class": "x"}, 0.0, terminal=True),
                    queue="mail")
    assert await reconciler(store, ledger).reconcile() == 0
    assert ledger.pending == {}
    assert await listed(store) == []
    assert await listed(store, "mail") == []
    assert await store.client.llen(store.keys.queue("default")) == 0
    assert await store.client.llen(store.keys.queue("mail")) == 0
    assert await store.client.zcard(store.keys.dead("mail")) == 1  # its own queue's set


async def test_settling_stops_at_the_first_failure_and_keeps_the_rest(
    unreachable: Store, ledger: Ledger
) -> None:
    ledger.remember(raw_job(1), Ack(), queue="default")
    ledger.remember(raw_job(2), Ack(), queue="default")
    passes = reconciler(unreachable, ledger)
    assert isinstance(await passes.settle_pending(), RedisError)
    assert len(ledger.pending) == 2
    with pytest.raises(RedisError):
        await passes.reconcile()
    assert len(ledger.pending) == 2
