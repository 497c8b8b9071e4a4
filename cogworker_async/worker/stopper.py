"""Stopper: ends a worker whose work is done — ``run --burst``: its queues and their due
scheduled and retry jobs are empty; ``--burst-wait S`` also waits for those due within S
seconds (arq's burst waits for every deferred job). The worker stops gracefully
(``Worker.stop``) and the process exits 0. (``run --max-jobs`` is ``Settings.max_jobs``,
which the dispatcher itself counts.)
"""

from __future__ import annotations

import logging
import math
from typing import Final, Protocol

import anyio

from cogworker_async.redis.errors import Unavailable
from cogworker_async.redis.store import Store
from cogworker_async.settings import Settings
from cogworker_async.worker.ledger import Ledger

log = logging.getLogger(__name__)

EMPTY_LOOKS: Final = 2
"""Looks in a row that must find nothing to do before a burst ends: a job between the
poller's move and the fetch, or enqueued by a job that just ended, is seen by one of
them."""

MAX_AHEAD: Final = 86400.0
"""Most seconds ``run --burst-wait`` looks ahead (a day): a burst that waits longer is a
worker, not a burst."""


def check_ahead(ahead: float) -> float:
    """``ahead`` seconds, or a ValueError: NaN would fail every backlog count (a Redis
    error at each look) and infinity would wait for every job scheduled, however far."""
    if not math.isfinite(ahead) or not 0 <= ahead <= MAX_AHEAD:
        raise ValueError(f"must be a finite number of seconds from 0 to {MAX_AHEAD:.0f} "
                         f"(a day), not {ahead!r}")
    return float(ahead)


class Stoppable(Protocol):
    store: Store
    settings: Settings
    ledger: Ledger

    @property
    def stopping(self) -> bool: ...

    def stop(self) -> None: ...


async def stop_when_drained(worker: Stoppable, ahead: float = 0.0) -> None:
    """Stop ``worker`` once it is idle and its queues hold nothing due (nor due within
    ``ahead`` seconds), ``EMPTY_LOOKS`` looks in a row (``idle_fetch_interval`` apart)."""
    ahead = check_ahead(ahead)
    store, ledger, queues = worker.store, worker.ledger, worker.settings.queue_names
    empty, damaged = 0, set[str]()
    while not worker.stopping:
        await anyio.sleep(worker.settings.idle_fetch_interval)
        if not ledger.slots.idle or ledger.pending:
            empty = 0
            continue
        try:  # a paused queue's jobs wait for a resume, not for this worker
            paused = await store.pauses(queues)
            waiting, wrong = await store.backlog([q for q in queues if q not in paused], ahead)
        except Unavailable as exc:  # an outage is not an empty queue: look again
            log.debug("burst: couldn't read the backlog: %s", exc)
            empty = 0
            continue
        if new := sorted(set(wrong) - damaged):  # nothing to do there: said once
            log.warning("burst: %s hold(s) another type than a queue's (not written by "
                        "cogworker: delete them): counted as empty", ", ".join(new))
            damaged.update(new)
        empty = empty + 1 if waiting == 0 and ledger.slots.idle else 0
        if empty >= EMPTY_LOOKS:
            ran = ledger.finished  # "1 job run", not "1 jobs run": the last line a user reads
            log.info("burst: nothing left to do (%d %s run): stopping", ran,
                     "job" if ran == 1 else "jobs")
            worker.stop()
            return

