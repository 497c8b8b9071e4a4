"""Hand-over at shutdown: what happens to each job still on this process's list.

Decided by ``plan`` (pure), applied by ``hand_over``:
- a job that ran and whose ack failed is dropped from the list: that is its ack;
- a job that ran and failed, but whose failure could not be filed, is handed over to
  ``unsettled`` with its record, for any live process to file — never requeued, which
  would run a ``retry: false`` job again on every deploy;
- what cannot even be handed over stays on the list (orphan recovery requeues it once
  this process is gone; it may then run again — the one window left, and logged);
- everything else never finished, and goes back to its queue.

Before the hand-over, the outcomes not yet settled (Redis was down when their jobs
finished) get what is left of ``shutdown_timeout`` to settle (``settle_pending_until``).
Given up, they stay on this process's list and recovery requeues them: they would run
again. That is the one window left, so it is worth the whole timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import anyio

from cogworker_async.errors import why
from cogworker_async.jobs import wire
from cogworker_async.jobs.status import SUCCEEDED, Ended
from cogworker_async.redis.errors import Unavailable
from cogworker_async.redis.store import Store
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.ledger import Ledger, Pending
from cogworker_async.worker.outcome import Ack, Filing
from cogworker_async.worker.reconcile import Reconciler
from cogworker_async.worker.settlement import Settler

log = logging.getLogger(__name__)

SETTLE_RETRY_PAUSE: Final = (0.1, 2.0)
"""First and longest pause (seconds) between tries to settle at shutdown (doubling)."""


@dataclass(slots=True)
class Plan:
    drop: list[tuple[bytes, Ended]] = field(default_factory=list)
    """Ran and settled by an ack (succeeded, or cancelled): dropped from the list (their
    ack), with how they ended."""
    hand_over: list[tuple[bytes, Filing]] = field(default_factory=list)
    """Ran and failed, not yet filed: handed over to ``unsettled``."""


def plan(pending: Mapping[bytes, Pending]) -> Plan:
    """A pending GiveBack is in neither: listed, it is requeued with the rest."""
    result = Plan()
    for raw, disposition in pending.items():
        if isinstance(disposition, Ack):
            result.drop.append((raw, disposition.ended))
        elif isinstance(disposition, Filing):
            result.hand_over.append((raw, disposition))
    return result


Relist = Callable[[], Awaitable[None]]


async def relist_if_wanted(ledger: Ledger, relist: Relist) -> None:
    """At shutdown the fence's task is gone: a relist a settle asked for (Redis lost
    this process's list) is run here, before the settles that need it."""
    if not ledger.relist_wanted:
        return
    try:
        await relist()
    except Exception as exc:  # RedisError, RelistRefused: the settles say the rest
        log.error("shutdown: couldn't list this process's jobs again (%s)", why(exc))


async def hand_over(store: Store, settler: Settler, ledger: Ledger, identity: str,
                    queues: Sequence[str]) -> None:
    """Apply the plan to this process's lists (one per queue): hand over failures, drop
    acked jobs, requeue everything else."""
    decided = plan(ledger.pending)
    keep: list[bytes] = []
    for raw, filed in decided.hand_over:
        queue = ledger.queue_of(raw)
        try:
            record = settler.record(Work(queue, raw), filed)
            await store.park_unsettled(identity, queue, raw, record)
            ledger.settled(raw)
        except Unavailable as exc:
            keep.append(raw)
            log.error("shutdown: couldn't hand over the failure of jid=%s (%s): left "
                      "in progress, it may run again", wire.jid_of(raw), why(exc))
    moved = 0
    for queue in queues:
        ours = [(raw, ended) for raw, ended in decided.drop
                if ledger.queue_of(raw) in (queue, "")]
        await _ack_what_records_need(store, ledger, identity, queue, ours)
        drop = [raw for raw, _ in ours if raw in ledger.pending]
        held = [raw for raw in keep if ledger.queue_of(raw) in (queue, "")]
        try:
            moved += await store.requeue(identity, queue, drop=drop, keep=held)
        except Unavailable as exc:  # one queue's node away: the others are still handed over
            log.error("shutdown: couldn't requeue this process's unfinished jobs of queue "
                      "%r (%s); orphan recovery will, once this process is gone", queue,
                      why(exc))
            continue
        for raw in drop:
            ledger.settled(raw)
    if moved:
        log.warning("shutdown: requeued %d unfinished job(s)", moved)


async def _ack_what_records_need(store: Store, ledger: Ledger, identity: str, queue: str,
                                 drops: Sequence[tuple[bytes, Ended]]) -> None:
    """Ack first, through the ack script, the drops whose status record must say more
    than "succeeded": a result to keep, or a cancel. The requeue's drop is an ack too,
    but it records every job it drops as succeeded, without a result. Best effort: what
    this fails to ack is dropped by the requeue all the same."""
    special = [(raw, wire.jid_of(raw), ended) for raw, ended in drops if ended != SUCCEEDED]
    if not special:
        return
    try:
        await store.ack(identity, queue, special)
    except Unavailable as exc:
        log.warning("shutdown: couldn't record the results of %d job(s) (%s): dropped "
                    "as succeeded, without them", len(special), why(exc))
        return
    for raw, _, _ in special:
        ledger.settled(raw)


async def settle_pending_until(reconciler: Reconciler, ledger: Ledger, deadline: float,
                               relist: Relist) -> None:
    """Retry the pending settlements, with backoff, until none is left or ``deadline``
    (``time.monotonic()``) has passed; relisting first whenever a settle asked for it."""
    began = time.monotonic()
    log.warning("shutdown: %d finished job(s) not yet settled (Redis unreachable); "
                "trying for up to %.0fs", len(ledger.pending), max(0.0, deadline - began))
    pause = SETTLE_RETRY_PAUSE[0]
    while ledger.pending and time.monotonic() < deadline:
        with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
            await relist_if_wanted(ledger, relist)
            if await reconciler.settle_pending() is None:
                break
            await anyio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, SETTLE_RETRY_PAUSE[1])
    if ledger.pending:
        log.error("shutdown: gave up settling %d finished job(s) after %.1fs: they stay "
                  "in progress, and run again once recovered", len(ledger.pending),
                  time.monotonic() - began)
    else:
        log.info("shutdown: settled every finished job in %.1fs", time.monotonic() - began)
