"""The unknown-queue warning: an enqueue on a queue that is not one of the App's.

``options(queue="defualt")`` returns a jid like any enqueue, and the job then waits
forever: no worker of the App serves that queue. The enqueue is where the typo can be
named, so the first enqueue on such a queue logs a warning (once per queue per App: a
loop of enqueues must not flood the log). It stays a warning, not an error: a worker
started with ``--queue`` may serve a queue this App does not declare.

The App's queues are its declared ``App(queues=...)``, the default queue and each
registered job's queue, read from the App when asked: a job registered after the first
enqueue counts too. The hot path is one set-membership check (``Client._prepare``):
``seen`` holds every queue found to be the App's and every queue warned about, so only
the first enqueue on a queue not yet seen comes here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection

log = logging.getLogger(__name__)


class QueueCheck:
    """One App's queues as its enqueues meet them, and the warning for the others."""

    def __init__(self, app_queues: Callable[[], Collection[str]]) -> None:
        self._app_queues = app_queues
        self.seen: set[str] = set()
        """Queues past the check: the App's own, and those already warned about."""
        self._lock = threading.Lock()  # enqueue_sync runs on a thread of its own

    def first_seen(self, queue: str) -> None:
        """A queue not in ``seen``: note it, warning if it is not one of the App's."""
        with self._lock:
            if queue in self.seen:  # another thread got here first
                return
            known = self._app_queues()
            self.seen.update(known)
            if queue in known:
                return
            self.seen.add(queue)
        log.warning("enqueue on queue %r, which is not one of this App's queues (%s): no "
                    "worker of this App serves it unless started with --queue %s "
                    "(a typo?)", queue, ", ".join(sorted(known)), queue)
