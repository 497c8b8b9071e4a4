"""Settler on its own: each disposition lands where it should (the list, retry and dead
sets of the job's own queue), and what cannot be settled is remembered, never left to
run again."""

from __future__ import annotations

import base64
import json
import math
import time

from cogworker_async.redis.store import Store
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.outcome import Ack, Filing, GiveBack
from cogworker_async.worker.settlement import Settler
from tests.worker.units.conftest import IDENTITY, listed, put_in_progress, raw_job


def settler(store: Store, ledger: Ledger, *, reliable: bool = True) -> Settler:
    return Settler(store, IDENTITY, reliable=reliable, ledger=ledger)


def failed_entry(n: int) -> dict[str, object]:
    entry = json.loads(raw_job(n))
    entry.update(retry_count=0, error_class="ValueError", error_message="boom")
    return entry


async def test_an_ack_takes_the_job_off_the_list(store: Store, ledger: Ledger) -> None:
    raw = raw_job(1)
    await put_in_progress(store, raw, raw_job(2))
    await settler(store, ledger).settle(Work("default", raw, jid="j1"), Ack())
    assert await listed(store) == [raw_job(2)]
    assert ledger.pending == {}


async def test_a_failure_is_filed_for_retry_when_due(store: Store, ledger: Ledger) -> None:
    raw = raw_job(1)
    await put_in_progress(store, raw)
    before = time.time()
    await settler(store, ledger).settle(Work("default", raw),
                                        Filing("retry", failed_entry(1), 30.0, terminal=False))
    assert await listed(store) == []
    [(entry, due)] = await store.client.zrange(store.keys.retry("default"), 0, -1,
                                                    withscores=True)
    assert json.loads(entry)["error_class"] == "ValueError"
    assert before + 30 <= due <= time.time() + 30


async def test_a_terminal_failure_is_filed_in_dead(store: Store, ledger: Ledger) -> None:
    raw = raw_job(1)
    await put_in_progress(store, raw)
    await settler(store, ledger).settle(Work("default", raw),
                                        Filing("dead", failed_entry(1), 0.0, terminal=True))
    assert await listed(store) == []
    [entry] = await store.client.zrange(store.keys.dead("default"), 0, -1)
    assert json.loads(entry)["jid"] == "j1"


async def test_a_failure_is_filed_in_the_sets_of_its_own_queue(store: Store,
                                                                ledger: Ledger) -> None:
    raw = raw_job(1, queue="mail")
    await put_in_progress(store, raw, queue="mail")
    entry = {**failed_entry(1), "queue": "mail"}
    await settler(store, ledger).settle(Work("mail", raw),
                                        Filing("retry", entry, 30.0, terminal=False))
    assert await listed(store, "mail") == []
    assert await store.client.zcard(store.keys.retry("mail")) == 1
    assert await store.client.zcard(store.keys.retry("default")) == 0


async def test_an_entry_that_is_not_json_still_reaches_dead(store: Store,
                                                            ledger: Ledger) -> None:
    """An entry ``job.encode`` refuses (NaN) is filed with the job's bytes as fetched:
    the job ran, it must leave the list and never run again."""
    raw = raw_job(1)
    await put_in_progress(store, raw)
    entry = {**failed_entry(1), "error_message": math.nan}
    await settler(store, ledger).settle(Work("default", raw),
                                        Filing("retry", entry, 1.0, terminal=False))
    assert await listed(store) == []
    assert await store.client.zcard(store.keys.retry("default")) == 0
    [dead] = await store.client.zrange(store.keys.dead("default"), 0, -1)
    filed = json.loads(dead)
    assert (filed["jid"], filed["error_class"]) == ("j1", "ValueError")
    assert base64.b64decode(filed["raw_payload_base64"]) == raw


async def test_a_job_given_back_goes_to_the_front_of_its_queue(store: Store,
                                                               ledger: Ledger) -> None:
    raw = raw_job(1, queue="mail")
    await store.client.lpush(store.keys.queue("mail"), raw_job(2, queue="mail"))
    await put_in_progress(store, raw, queue="mail")
    await settler(store, ledger).settle(Work("mail", raw), GiveBack())
    assert await listed(store, "mail") == []
    # Fetch takes from the right: the given-back job is next.
    assert await store.client.rpop(store.keys.queue("mail")) == raw


async def test_basic_fetch_files_without_a_list(store: Store, ledger: Ledger) -> None:
    await settler(store, ledger, reliable=False).settle(
        Work("default", raw_job(1)), Filing("dead", failed_entry(1), 0.0, terminal=True))
    assert await store.client.zcard(store.keys.dead("default")) == 1


async def test_an_outcome_redis_refuses_is_remembered_not_run_again(
    unreachable: Store, ledger: Ledger
) -> None:
    ran, failed = Work("default", raw_job(1)), Work("mail", raw_job(2, queue="mail"))
    filing = Filing("dead", failed_entry(2), 0.0, terminal=True)
    settle = settler(unreachable, ledger).settle
    await settle(ran, Ack())
    await settle(failed, filing)
    assert ledger.pending == {ran.raw: Ack(), failed.raw: filing}
    # Settled later in the slot of the queue each came from.
    assert (ledger.queue_of(ran.raw), ledger.queue_of(failed.raw)) == ("default", "mail")
    assert ledger.strays([ran.raw, failed.raw]) == set()
    assert ledger.strays([ran.raw, failed.raw]) == set()


async def test_a_give_back_redis_refuses_stays_listed_for_the_hand_over(
    unreachable: Store, ledger: Ledger
) -> None:
    """Not remembered: it never ran, so requeueing it with the rest is right."""
    await settler(unreachable, ledger).settle(Work("default", raw_job(1)), GiveBack())
    assert ledger.pending == {}


async def test_basic_fetch_cannot_remember(unreachable: Store, ledger: Ledger) -> None:
    """Nothing is listed with basic fetch: a lost outcome is logged, not kept."""
    await settler(unreachable, ledger, reliable=False).settle(
        Work("default", raw_job(1)), Filing("dead", failed_entry(1), 0.0, terminal=True))
    assert ledger.pending == {}
