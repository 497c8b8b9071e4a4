"""Fencing: what a process does on learning it was declared dead while paused.

A process stopped (SIGSTOP, a VM pause, a loop blocked past ``orphan_threshold``) looks
dead to its peers, and recovery requeues its jobs — they run again elsewhere. When it
wakes, its next beat says so (``beat.lua`` reports a zombie). It must then stop the jobs
no longer on its own list and drop their unsettled outcomes: its late settles would
change nothing, and its copies would keep running beside the recovered ones.

Only positive evidence fences: recovery's mark in ``declared_dead``. Keys that are merely
missing (Redis restarted without persistence, a failover to a replica that had not seen
them) mean Redis lost them, not that another process took the jobs: the beat then
re-registers the process, and ``relist`` puts its running and unsettled jobs back on its
own list so that they finish, settle, and are recovered should it crash from now on.
A relist is also asked for by the ledger (a settle that found its job missing, or a
reconcile pass that did twice: see ``ledger.py``); ``relist.lua`` refuses while this
process is marked declared dead, so a relist never lists jobs recovered elsewhere.

The mark stays until ``fence`` has run: ``beat.lua`` reports ZOMBIE on every beat while
it is there (a lost reply is not a lost fencing), and ``fence`` clears it last. Fencing
twice is harmless: it cancels only what is not on the list, and jobs fetched after the
first fencing are (tests/worker/units/test_fence.py).

The news arrives on the heartbeat's thread; the fencing itself runs as a task of the
worker's upkeep group, woken by an event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import anyio

from cogworker_async.errors import why
from cogworker_async.jobs import wire
from cogworker_async.redis.store import Store
from cogworker_async.worker.ledger import Ledger

log = logging.getLogger(__name__)


class RelistRefused(Exception):
    """``relist.lua`` refused: this process is marked declared dead (fencing first)."""


class Fence:
    def __init__(self, store: Store, identity: str, ledger: Ledger, *,
                 queues: Sequence[str], retry_pause: float) -> None:
        self.store = store
        self.identity = identity
        self.queues = list(dict.fromkeys(queues))
        """This process's queues: it has a list, and beats, in each one's slot."""
        self.lost_queues: set[str] = set()
        """Queues whose slot lost this process's keys, until a relist has listed its jobs
        again: fencing does not judge their jobs (missing from a lost list is no sign
        that another process took them)."""
        self.ledger = ledger
        self.retry_pause = retry_pause
        self._loop = asyncio.get_running_loop()  # the worker's: made in it
        self._declared = anyio.Event()
        self._forgotten = anyio.Event()
        ledger.on_relist_wanted(self._wake_relist)

    def declared_dead_from_thread(self) -> None:
        """Called by the heartbeat thread when a beat reports this process a zombie."""
        self._loop.call_soon_threadsafe(self._declared_dead)

    def _declared_dead(self) -> None:
        # Runs as a plain loop callback (call_soon_threadsafe), outside any task, where
        # anyio cannot tell its backend (``start_soon`` would raise NoEventLoopError,
        # swallowed by asyncio): so it only sets an event, which needs no task, and
        # ``run`` does the fencing (tests/worker/chaos/processes/test_zombie.py).
        self._declared.set()

    def forgotten_from_thread(self, slots: frozenset[str | None] | None = None) -> None:
        """Called by the heartbeat thread when Redis had lost this process's keys in
        ``slots`` (queues; None in it: the namespace's slot, where no list lives;
        ``slots`` None: every slot)."""
        self._loop.call_soon_threadsafe(self._keys_lost, slots)

    def alive_from_thread(self, beat: int) -> None:
        """Called by the heartbeat thread when beat number ``beat`` found the keys."""
        if self.ledger.doubtful:  # read across threads: a doubt missed waits a beat
            self._loop.call_soon_threadsafe(self.ledger.beat_alive, beat)

    def _keys_lost(self, slots: frozenset[str | None] | None) -> None:
        queues = set(self.queues) if slots is None else {s for s in slots if s is not None}
        if not queues:  # the namespace's registry only: re-registered by that beat
            return
        self.lost_queues.update(queues)
        self.ledger.keys_lost(queues)
        self.ledger.want_relist()  # wakes this fence (``_wake_relist``)

    def _wake_relist(self) -> None:
        """The ledger wants a relist (``Ledger.want_relist``): ``run`` does it."""
        self._forgotten.set()

    async def run(self) -> None:
        """Fence, or relist, each time a beat reports why (forever)."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._serve, lambda: self._declared, self._reset_declared, self.fence)
            tg.start_soon(self._serve, lambda: self._forgotten, self._reset_forgotten,
                          self.relist)

    def _reset_declared(self) -> None:
        self._declared = anyio.Event()

    def _reset_forgotten(self) -> None:
        self._forgotten = anyio.Event()

    async def _serve(self, event: Callable[[], anyio.Event], reset: Callable[[], None],
                     act: Callable[[], Awaitable[None]]) -> None:
        while True:
            await event().wait()
            reset()
            try:
                await act()
            except Exception as exc:  # Redis away: try again; never stop the worker
                log.error("%s failed (%s); retrying", act.__name__, why(exc))
                await anyio.sleep(self.retry_pause)
                event().set()

    async def relist(self) -> None:
        """Redis lost this process's keys: list its in-flight jobs again (the ones that
        need a list entry: ``Ledger.in_flight``). No settle that needs the list runs
        meanwhile (``Ledger.relisting``), so nothing it lists is settled already."""
        ledger = self.ledger
        ledger.relist_began()
        listed, refused = 0, False
        try:
            async with ledger.relisting():
                grouped = ledger.in_flight_by_queue()
                for queue in [*grouped, *(q for q in self.lost_queues if q not in grouped)]:
                    some = await self.store.relist(self.identity, queue, grouped.get(queue, []))
                    if some is None:  # marked declared dead in that queue's slot: the
                        refused = True  # others are still listed (one may have lost keys)
                        continue
                    listed += some
                    self.lost_queues.discard(queue)
        except BaseException:
            ledger.relist_failed()
            raise
        if refused:
            ledger.relist_failed()
            raise RelistRefused("this process is marked declared dead: fencing first")
        log.warning("worker %s: Redis had lost this process's keys (restarted without "
                    "persistence?); registered again, %d running or unsettled job(s) "
                    "listed again", self.identity, listed)

    async def fence(self) -> None:
        """Stop the jobs no longer ours (their requeued copies run elsewhere) and forget
        their outcomes."""
        # Only what was held before the lists are read (one read per queue, on several
        # nodes): a job fetched from a queue whose list was already read is ours.
        held = {raw for raw in (*self.ledger.running, *self.ledger.pending)
                if self.ledger.queue_of(raw) not in self.lost_queues}
        listed: set[bytes] = set()
        for queue in self.queues:
            listed.update(await self.store.in_progress(self.identity, queue))
        not_ours = self.ledger.not_ours(listed, among=held)
        self.ledger.disown(not_ours.unlisted + not_ours.stale)
        for scope in not_ours.scopes:
            scope.cancel()
        for raw in not_ours.stale:
            self.ledger.forget(raw)
            log.error("jid=%s finished here, but was recovered by another process while "
                      "this one was paused: it may run again", wire.jid_of(raw))
        log.error("worker %s was declared dead (paused past orphan_threshold?): its jobs "
                  "were recovered elsewhere; %d running job(s) cancelled here",
                  self.identity, len(not_ours.scopes))
        # Last: should this fail, the next beat says ZOMBIE again and this runs again.
        await self.store.clear_declared_dead(self.identity, self.queues)
