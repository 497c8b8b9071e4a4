"""Fencing: what a process does on learning it was declared dead while paused.

A process stopped (SIGSTOP, a VM pause, a loop blocked past ``orphan_threshold``) looks
dead to its peers, and recovery requeues its jobs — they run again elsewhere. When it
wakes, its next beat says so (``beat.lua`` reports a zombie). It must then stop the jobs
no longer on its own list and drop their unsettled outcomes: its late settles would
change nothing, and its copies would keep running beside the recovered ones.

The news arrives on the heartbeat's thread; the fencing itself runs as a task of the
worker's upkeep group, woken by an event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import MutableMapping

import anyio

from cogworker_async import job
from cogworker_async.errors import why
from cogworker_async.redis.store import Store
from cogworker_async.worker.processor import Processor
from cogworker_async.worker.settlement import Pending

log = logging.getLogger("cogworker_async")


class Fence:
    def __init__(self, store: Store, identity: str, processor: Processor,
                 pending: MutableMapping[bytes, Pending], *, retry_pause: float) -> None:
        self.store = store
        self.identity = identity
        self.processor = processor
        self.pending = pending
        self.retry_pause = retry_pause
        self._loop = asyncio.get_running_loop()  # the worker's: made in it
        self._declared = anyio.Event()

    def declared_dead_from_thread(self) -> None:
        """Called by the heartbeat thread when a beat reports this process a zombie."""
        self._loop.call_soon_threadsafe(self._declared_dead)

    def _declared_dead(self) -> None:
        # Runs as a plain loop callback (call_soon_threadsafe), outside any task: anyio
        # cannot tell its backend there, so ``start_soon`` from here raised
        # NoEventLoopError (logged by asyncio, swallowed) and a zombie never fenced
        # itself. Setting an event needs no task; ``run`` waits on it.
        self._declared.set()

    async def run(self) -> None:
        """Fence each time a beat reports this process declared dead (forever)."""
        while True:
            await self._declared.wait()
            self._declared = anyio.Event()
            try:
                await self.fence()
            except Exception as exc:  # Redis away: try again; never stop the worker
                log.error("fencing this declared-dead process failed (%s); retrying", why(exc))
                await anyio.sleep(self.retry_pause)
                self._declared.set()

    async def fence(self) -> None:
        """Stop the jobs no longer ours (their requeued copies run elsewhere) and forget
        their outcomes."""
        listed = set(await self.store.in_progress(self.identity))
        cancelled = self.processor.cancel_unlisted(listed)
        stale = [raw for raw in self.pending if raw not in listed]
        for raw in stale:
            self.pending.pop(raw, None)
            log.error("jid=%s finished here, but was recovered by another process while "
                      "this one was paused: it may run again", job.jid_of(raw))
        log.error("worker %s was declared dead (paused past orphan_threshold?): its jobs "
                  "were recovered elsewhere; %d running job(s) cancelled here",
                  self.identity, cancelled)
