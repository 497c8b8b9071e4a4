"""Hand-over at shutdown: what happens to each job still on this process's list.

Decided here (pure), applied by the Manager:
- a job that ran and whose ack failed is dropped from the list: that is its ack;
- a job that ran and failed, but whose failure could not be filed, is handed over to
  ``unsettled`` with its record, for any live process to file — never requeued, which
  would run a ``retry: false`` job again on every deploy;
- what cannot even be handed over stays on the list (orphan recovery requeues it once
  this process is gone; it may then run again — the one window left, and logged);
- everything else never finished, and goes back to its queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cogworker_async.worker.outcome import Ack, File
from cogworker_async.worker.settlement import Pending


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
