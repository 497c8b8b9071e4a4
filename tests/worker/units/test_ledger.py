"""The ledger's rules, pure: what counts as running, pending, a stray, or no longer ours."""

from __future__ import annotations

import json
import threading

import anyio
import pytest
from anyio.abc import TaskStatus

from cogworker_async.worker.fetch import Work
from cogworker_async.worker.heartbeat import workers_entries
from cogworker_async.worker.ledger import PENDING_PER_SLOT, Ledger
from cogworker_async.worker.outcome import Ack, Filing, GiveBack


def work(n: int) -> Work:
    return Work("default", f'{{"jid": "j{n}", "class": "x"}}'.encode())


def test_an_admitted_job_takes_a_slot_and_is_never_a_stray() -> None:
    ledger = Ledger(slots=2, concurrency=2)
    a = work(1)
    ledger.admit(a)
    assert ledger.slots.free == 1
    assert ledger.in_flight() == {a.raw}
    for _ in range(3):  # however many passes see it listed
        assert ledger.strays([a.raw]) == set()


def test_a_stray_is_confirmed_on_the_second_pass_in_a_row_not_the_first() -> None:
    ledger = Ledger(slots=1, concurrency=1)
    ghost = work(1).raw
    assert ledger.strays([ghost]) == set()
    assert ledger.strays([ghost]) == {ghost}


def test_a_job_admitted_between_two_passes_is_not_a_stray() -> None:
    """Fetched (listed in Redis) before the first pass, admitted before the second."""
    ledger = Ledger(slots=1, concurrency=1)
    fetched = work(1)
    assert ledger.strays([fetched.raw]) == set()
    ledger.admit(fetched)
    assert ledger.strays([fetched.raw]) == set()


def test_passes_must_be_in_a_row() -> None:
    ledger = Ledger(slots=1, concurrency=1)
    ghost = work(1).raw
    assert ledger.strays([ghost]) == set()
    assert ledger.strays([]) == set()  # gone for one pass: suspicion starts over
    assert ledger.strays([ghost]) == set()
    assert ledger.strays([ghost]) == {ghost}


def test_a_confirmed_stray_still_listed_needs_two_more_passes() -> None:
    """Its give-back failed (or raced): it is not requeued on every pass."""
    ledger = Ledger(slots=1, concurrency=1)
    ghost = work(1).raw
    assert [ledger.strays([ghost]) for _ in range(4)] == [set(), {ghost}, set(), {ghost}]


FILED = Filing("dead", {"jid": "x"}, 0.0, terminal=True)


def test_a_pending_outcome_is_never_a_stray_until_it_is_settled() -> None:
    ledger = Ledger(slots=1, concurrency=1)
    done = work(1)
    ledger.admit(done)
    ledger.remember(done.raw, FILED)
    ledger.finish(done)
    assert ledger.in_flight() == {done.raw}  # from running to pending with no gap
    assert [ledger.strays([done.raw]) for _ in range(3)] == [set(), set(), set()]
    ledger.settled(done.raw)
    assert ledger.in_flight() == set()
    assert [ledger.strays([done.raw]) for _ in range(2)] == [set(), {done.raw}]


def test_backpressure_once_pending_reaches_its_bound_per_slot() -> None:
    ledger = Ledger(slots=3, concurrency=2)
    bound = 2 * PENDING_PER_SLOT
    for n in range(bound - 1):
        ledger.remember(work(n).raw, Ack())
    assert not ledger.backpressure
    ledger.remember(work(bound).raw, Filing("dead", {"jid": "x"}, 0.0, terminal=True))
    assert ledger.backpressure
    ledger.settled(work(bound).raw)
    assert not ledger.backpressure


async def test_not_ours_cancels_unlisted_runs_and_names_stale_outcomes() -> None:
    ledger = Ledger(slots=2, concurrency=2)
    kept, taken, stale, listed_pending = work(1), work(2), work(3), work(4)
    cancelled: list[bytes] = []

    async def run(w: Work, *, task_status: TaskStatus[None]) -> None:
        ledger.admit(w)
        with anyio.CancelScope() as scope:
            ledger.start(w, scope)
            task_status.started()
            await anyio.sleep_forever()
        ledger.stop(w)
        cancelled.append(w.raw)

    ledger.remember(stale.raw, Ack())
    ledger.remember(listed_pending.raw, Ack())
    async with anyio.create_task_group() as tg:
        await tg.start(run, kept)
        await tg.start(run, taken)
        assert ledger.busy == 2
        not_ours = ledger.not_ours({kept.raw, listed_pending.raw})
        assert not_ours.stale == [stale.raw]
        assert len(not_ours.scopes) == 1
        for scope in not_ours.scopes:
            scope.cancel()
        await anyio.wait_all_tasks_blocked()
        assert cancelled == [taken.raw]
        assert ledger.busy == 1
        tg.cancel_scope.cancel()


def test_a_job_past_its_run_is_not_cancelled_by_fencing() -> None:
    """Between ``stop`` and ``finish`` it is settling: nothing left to cancel."""
    ledger = Ledger(slots=1, concurrency=1)
    settling = work(1)
    ledger.admit(settling)
    ledger.start(settling, object())  # type: ignore[arg-type]
    ledger.stop(settling)
    assert ledger.not_ours(set()).scopes == []
    assert ledger.in_flight() == {settling.raw}  # still running until settled


def test_snapshot_lists_running_jobs() -> None:
    ledger = Ledger(slots=2, concurrency=2)
    a, b = work(1), work(2)
    ledger.admit(a)
    ledger.admit(b)
    ledger.finish(a)
    assert ledger.snapshot() == [b]


def test_snapshot_is_safe_from_another_thread_while_jobs_come_and_go() -> None:
    ledger = Ledger(slots=10**6, concurrency=1)
    works = [work(n) for n in range(64)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def heartbeat() -> None:
        try:
            while not stop.is_set():
                assert all(isinstance(w, Work) for w in ledger.snapshot())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=heartbeat)
    thread.start()
    try:
        for _ in range(2000):
            for w in works:
                ledger.admit(w)
            for w in works:
                ledger.finish(w)
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert ledger.snapshot() == []


@pytest.mark.parametrize("total", [1, 3])
async def test_released_slots_nudge_the_dispatcher(total: int) -> None:
    ledger = Ledger(slots=total, concurrency=total)
    nudge = ledger.slots.fresh_nudge()
    ledger.admit(work(1))
    assert not ledger.slots.idle
    ledger.slots.release()
    assert nudge.is_set()
    assert ledger.slots.idle
    assert not ledger.slots.fresh_nudge().is_set()


def test_the_workers_hash_shows_each_running_job_and_skips_unreadable_ones() -> None:
    ledger = Ledger(slots=2, concurrency=2)
    readable, garbage = work(1), Work("default", b"not json")
    ledger.admit(readable)
    ledger.admit(garbage)
    entries = workers_entries(ledger.snapshot())
    assert list(entries) == ["j1"]
    assert json.loads(entries["j1"]) == {"queue": "default", "class": "x",
                                         "run_at": readable.fetched_at}


# -- what a relist lists (tests/worker/test_lost_list_settles.py: the whole story) ----


def test_an_ack_is_never_relisted_from_its_decision_on() -> None:
    """Listed again after its ack ran (finding nothing), a finished job would be a stray
    and run again."""
    ledger = Ledger(slots=2, concurrency=2)
    acked, pending_ack = work(1), work(2)
    ledger.admit(acked)
    ledger.acked(acked.raw)  # what Settler.settle does before sending the ack
    ledger.remember(pending_ack.raw, Ack())
    assert ledger.in_flight() == set()
    ledger.finish(acked)
    assert ledger.needless == set()


def test_filings_and_give_backs_are_relisted_until_settled_but_not_while_settling() -> None:
    ledger = Ledger(slots=3, concurrency=3)
    running, filed, given = work(1), work(2), work(3)
    for w in (running, filed, given):
        ledger.admit(w)
    ledger.remember(given.raw, GiveBack(), queue="q")
    assert ledger.in_flight() == {running.raw, filed.raw, given.raw}
    ledger.settle_began(filed.raw)
    assert ledger.in_flight() == {running.raw, given.raw}
    ledger.settle_ended(filed.raw)
    ledger.left_list(filed.raw)  # its script returned 1: off the list
    assert ledger.in_flight() == {running.raw, given.raw}
    ledger.settled(given.raw)
    assert ledger.queues == {}


def test_unsure_and_disowned_jobs_are_never_relisted() -> None:
    ledger = Ledger(slots=2, concurrency=2)
    unsure, disowned = work(1), work(2)
    ledger.admit(unsure)
    ledger.admit(disowned)
    ledger.reply_lost(unsure.raw)
    ledger.disown([disowned.raw])
    assert ledger.in_flight() == set()
    ledger.finish(unsure)
    ledger.finish(disowned)
    assert ledger.unsure == set()
    assert ledger.disowned == set()


def test_an_in_flight_job_missing_on_two_passes_in_a_row_asks_for_a_relist() -> None:
    """A lost FORGOTTEN reply: nobody else would ever relist it."""
    asked: list[bool] = []
    ledger = Ledger(slots=1, concurrency=1)
    ledger.on_relist_wanted(lambda: asked.append(True))
    running = work(1)
    ledger.admit(running)
    assert ledger.strays([]) == set()
    assert asked == []
    assert ledger.strays([]) == set()
    assert asked == [True]
    assert ledger.relist_wanted


def test_a_job_admitted_after_the_list_was_read_asks_for_no_relist() -> None:
    asked: list[bool] = []
    ledger = Ledger(slots=1, concurrency=1)
    ledger.on_relist_wanted(lambda: asked.append(True))
    fetched = work(1)
    ledger.admit(fetched)
    assert ledger.strays([]) == set()  # read before its fetch put it there
    assert ledger.strays([fetched.raw]) == set()
    assert ledger.strays([fetched.raw]) == set()
    assert asked == []
