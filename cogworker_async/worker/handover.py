"""Hand-over at shutdown: what happens to each job still on this process's list.

Decided by ``plan`` (pure), applied by ``hand_over``:
- a job that ran and whose ack failed is dropped from the list: that is its ack;
- a job that ran and failed, but whose failure could not be filed, is handed over to
  ``unsettled`` with its record, for any live process to file — never requeued, which
  would run a ``retry: false`` job again on every deploy;
- what cannot even be handed over stays on the list (orphan recovery requeues it once
  this process is gone; it may then run again — the one window left, and logged);
- everything else never finished, and goes back to its queue.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

from cogworker_async import job
from cogworker_async.errors import why
from cogworker_async.redis.store import RedisError, Store
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.outcome import Ack, File
from cogworker_async.worker.settlement import Pending, Settler

log = logging.getLogger("cogworker_async")


@dataclass(slots=True)
class Plan:
    drop: list[bytes] = field(default_factory=list)
    """Ran and succeeded: dropped from the list (their ack)."""
    hand_over: list[tuple[bytes, File]] = field(default_factory=list)
    """Ran and failed, not yet filed: handed over to ``unsettled``."""


def plan(pending: Mapping[bytes, Pending]) -> Plan:
    result = Plan()
    for raw, disposition in pending.items():
        if isinstance(disposition, Ack):
            result.drop.append(raw)
        else:
            result.hand_over.append((raw, disposition))
    return result


async def hand_over(store: Store, settler: Settler, pending: MutableMapping[bytes, Pending],
                    identity: str, default_queue: str) -> None:
    """Apply the plan to this process's list: hand over failures, drop acked jobs,
    requeue everything else."""
    decided = plan(pending)
    keep: list[bytes] = []
    for raw, filed in decided.hand_over:
        try:
            record = settler.record(Work("", raw), filed)
            await store.park_unsettled(identity, raw, record)
            pending.pop(raw, None)
        except RedisError as exc:
            keep.append(raw)
            log.error("shutdown: couldn't hand over the failure of jid=%s (%s): left "
                      "in progress, it may run again", job.jid_of(raw), why(exc))
    try:
        moved = await store.requeue(identity, default_queue, drop=decided.drop, keep=keep)
    except RedisError as exc:
        log.error("shutdown: couldn't requeue this process's unfinished jobs (%s); "
                  "orphan recovery will, once this process is gone", why(exc))
        return
    for raw in decided.drop:
        pending.pop(raw, None)
    if moved:
        log.warning("shutdown: requeued %d unfinished job(s)", moved)
