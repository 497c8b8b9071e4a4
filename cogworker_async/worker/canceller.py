"""Canceller: the worker's side of cancels and progress.

A cancel of a running job (``lua/cancel.lua``) adds its jid to the cancel set of the
process running it, in the job's queue slot. This actor polls those sets every
``POLL_INTERVAL`` while anything runs (one round trip per node, whatever the
concurrency) and cancels the runs named: an async job's scope is cancelled (it sees
``CancelledError``); a plain function only sees ``current_job().cancel_requested``. A
cancel that arrives for a job fetched but not started yet is kept (``ASKED_FOR``
seconds) and applied when it starts. A cancel for a process that died is not lost:
the job's record says ``cancel``, and recovery drops the job instead of requeueing it.

On the same tick it writes the progress runs reported since the last (coalesced:
``RunControl.unwritten`` keeps only the last report). Progress is best effort: a failed
write is dropped, the next report writes again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Final, Protocol

import anyio

from cogworker_async.errors import why
from cogworker_async.jobs.context import RunControl
from cogworker_async.jobs.status import JobStatus
from cogworker_async.redis.errors import Unavailable

log = logging.getLogger(__name__)


class CancelStore(Protocol):
    """What the canceller needs of the Store (its poll loop, which only a worker runs)."""

    async def set_progress(self, identity: str,
                           updates: Sequence[tuple[str, str, float, bytes | None]]) -> None: ...
    async def take_cancels(self, identity: str,
                           queues: Sequence[str]) -> list[tuple[str, str]]: ...
    async def running_statuses(self, pairs: Sequence[tuple[str, str]],
                               fields: Sequence[str]) -> list[JobStatus]: ...

POLL_INTERVAL: Final = 0.5
"""Seconds between two looks at the cancel sets (and progress writes): a running async
job is cancelled within about this, plus a round trip."""
ASKED_FOR: Final = 60.0
"""Seconds a cancel for a jid this process does not run (yet) is remembered."""
MAX_ASKED: Final = 10_000


class Canceller:
    def __init__(self, store: CancelStore, identity: str, queues: Sequence[str]) -> None:
        self.store = store
        self.identity = identity
        self.queues = list(queues)
        self.running: dict[str, RunControl] = {}
        """jid -> the control of its run in this process."""
        self._asked: dict[str, float] = {}
        """jid -> when a cancel came for it while it was not running here."""

    def start(self, control: RunControl) -> None:
        """A run begins: cancel it at once if a cancel came for it already."""
        self.running[control.jid] = control
        asked = self._asked.pop(control.jid, None)
        if asked is not None and time.monotonic() - asked < ASKED_FOR:
            control.cancel_requested = True  # not started: never call its stop

    def finish(self, control: RunControl) -> None:
        if self.running.get(control.jid) is control:
            del self.running[control.jid]

    async def run(self) -> None:
        while True:
            await anyio.sleep(POLL_INTERVAL)
            if not self.running:
                continue
            try:
                await self.tick()
            except Unavailable as exc:  # the next tick tries again
                log.debug("looking for cancels failed: %s", why(exc))

    async def tick(self) -> None:
        """Write unwritten progress; cancel the runs asked for."""
        updates = []
        for control in list(self.running.values()):
            if control.unwritten is not None:
                fraction, info = control.unwritten
                control.unwritten = None
                updates.append((control.queue, control.jid, fraction, info))
        if updates:
            await self.store.set_progress(self.identity, updates)
        asked = await self.store.take_cancels(self.identity, self.queues)
        if not asked:
            return
        # A set entry may be stale: the run it was meant for ended before this tick, and
        # the jid (chosen by the caller) runs again. Only a record that still asks for a
        # cancel of a run of this process counts.
        records = await self.store.running_statuses(asked, ("state", "by", "cancel"))
        for (_, jid), found in zip(asked, records, strict=True):
            if found.cancel_requested and found.process == self.identity:
                self.cancel(jid)

    def cancel(self, jid: str) -> None:
        control = self.running.get(jid)
        if control is not None:
            log.info("cancelling jid=%s: a cancel was asked for", jid)
            control.cancel()
            return
        now = time.monotonic()
        if len(self._asked) >= MAX_ASKED:
            self._asked = {j: at for j, at in self._asked.items() if now - at < ASKED_FOR}
        if len(self._asked) < MAX_ASKED:
            self._asked[jid] = now
