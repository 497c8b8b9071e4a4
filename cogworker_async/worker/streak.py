"""Streak: one line when a loop starts failing, one when it recovers.

Every upkeep loop of a worker (fetch, idle wait, wake-ups, poller, recovery, reconcile,
cron, stats, heartbeat) retries forever while Redis is away. Logging each failed try
turned a ten-second Redis restart into thousands of lines, burying the one that said
what was wrong. A ``Streak`` remembers whether its loop is failing and since when: the
first failure is logged (warning, with what Redis said), repeats only at debug, and the
first success after it logs how long the outage lasted.

Each record carries ``streak=<loop name>`` (``logging`` extra) so a log pipeline, or a
test, can tell the loops apart. A streak belongs to one loop, on one thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from cogworker_async.errors import why

log = logging.getLogger(__name__)

FAILED: Final = "%s failed (%s); retrying (said again only once it recovers)"
RECOVERED: Final = "%s recovered after %.1fs (%d failed tries)"


class Streak:
    """Whether the loop named ``what`` is failing, and since when (monotonic time)."""

    def __init__(self, what: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self._clock = clock
        self.since: float | None = None
        """``clock()`` of the first failure of the current streak; None while healthy."""
        self.tries = 0
        self._traced = False
        """A traceback was shown in the current streak."""

    @property
    def failing(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException, *, trace: bool = False) -> None:
        """One more failed try. ``trace``: a bug rather than Redis; show the traceback
        (once, like the line itself)."""
        self.tries += 1
        extra = {"streak": self.what}
        if self.since is None or (trace and not self._traced):
            # A bug is shown once even amid an outage: it is not Redis's to end.
            self.since = self._clock() if self.since is None else self.since
            self._traced = self._traced or trace
            log.warning(FAILED, self.what, why(exc), exc_info=exc if trace else None,
                        extra=extra)
        else:
            log.debug("%s still failing (%s)", self.what, why(exc), extra=extra)

    def succeeded(self) -> None:
        """A try worked: if the loop was failing, say it recovered and after how long."""
        if self.since is None:
            return
        lasted, tries = self._clock() - self.since, self.tries
        self.since, self.tries, self._traced = None, 0, False
        log.info(RECOVERED, self.what, lasted, tries, extra={"streak": self.what})
