"""The locks around a run: unique-job locks and periodic jobs' running locks.

All best effort, and never the reason a job is lost or run twice: every lock has a TTL,
is owned by a jid (released only by its owner), and a failure here is logged and left
to the TTL. What each payload needs is in the payload itself (``unique_digest``,
``unique_policy``, ``unique_ttl``, ``periodic``), so any process can release them —
orphan recovery included, when it buries a job as ProcessDied.
"""

from __future__ import annotations

import logging
from typing import Protocol

from cogworker_async.errors import why
from cogworker_async.jobs import wire
from cogworker_async.jobs.periodic import RUNNING_LOCK_TTL
from cogworker_async.jobs.wire import Payload
from cogworker_async.redis.keys import Keys
from cogworker_async.worker.outcome import Ack, Disposition, Filing

log = logging.getLogger(__name__)


class LockStore(Protocol):
    """What the locks need of the Store (and of the in-memory one of ``testing``)."""

    @property
    def keys(self) -> Keys: ...
    async def take_lock(self, key: str, owner: str, ttl: float) -> bool: ...
    async def release_lock(self, key: str, owner: str) -> bool: ...
    async def extend_lock(self, key: str, owner: str, ttl: float) -> bool: ...


class JobLocks:
    def __init__(self, store: LockStore) -> None:
        self.store = store

    async def before_run(self, payload: Payload) -> bool:
        """False if the job must not run now (its periodic predecessor still runs)."""
        jid = payload["jid"]
        periodic = wire.text(payload, "periodic")
        if periodic is not None:
            key = self.store.keys.periodic_running(_queue(payload), periodic)
            try:
                if not await self.store.take_lock(key, jid, RUNNING_LOCK_TTL):
                    log.warning("periodic %s: skipped jid=%s, the previous run is still "
                                "running", periodic, jid)
                    return False
            except Exception as exc:
                log.warning("periodic %s: running lock unavailable (%s); running anyway",
                            periodic, why(exc))
        if wire.text(payload, "unique_policy") == "until_started":
            await self._release_unique(payload)
        return True

    async def never_started(self, payload: Payload) -> None:
        """A job that will not start (past its deadline): its ``until_started`` lock is
        freed now, as its start would have freed it (an ``until_executed`` one is freed
        by ``after_settle``, as at any end)."""
        if wire.text(payload, "unique_policy") == "until_started":
            await self._release_unique(payload)

    async def after_settle(self, payload: Payload, disposition: Disposition,
                           *, ran: bool) -> None:
        """Release or extend what the job held, now that its outcome is recorded."""
        periodic = wire.text(payload, "periodic")
        if ran and periodic is not None:
            await self._release(self.store.keys.periodic_running(_queue(payload), periodic),
                                payload)
        if wire.text(payload, "unique_policy") != "until_executed":
            return
        if isinstance(disposition, Ack) or (isinstance(disposition, Filing) and
                                            disposition.terminal):
            await self._release_unique(payload)
        elif isinstance(disposition, Filing):
            await self._extend_unique(payload, disposition.delay)

    async def _extend_unique(self, payload: Payload, delay: float) -> None:
        """Kept over the retry delay: the retry is the same job, still unique."""
        digest = wire.text(payload, "unique_digest")
        if digest is None:
            return
        ttl = delay + (wire.number(payload, "unique_ttl") or RUNNING_LOCK_TTL)
        try:
            await self.store.extend_lock(self.store.keys.unique(_queue(payload), digest),
                                         payload["jid"], ttl)
        except Exception as exc:
            log.warning("couldn't extend the unique lock of jid=%s: %s", payload["jid"],
                        why(exc))

    async def _release_unique(self, payload: Payload) -> None:
        digest = wire.text(payload, "unique_digest")
        if digest is not None:
            await self._release(self.store.keys.unique(_queue(payload), digest), payload)

    async def _release(self, key: str, payload: Payload) -> None:
        try:
            await self.store.release_lock(key, payload["jid"])
        except Exception as exc:
            log.warning("couldn't release %s for jid=%s (it expires): %s", key,
                        payload["jid"], why(exc))


def _queue(payload: Payload) -> str:
    """The job's queue: its locks are in that queue's slot (``keys.unique``)."""
    return wire.text(payload, "queue") or ""


async def release_for_dead(store: LockStore, payload: Payload) -> None:
    """A job buried in dead by recovery releases what it held, like any terminal failure."""
    locks = JobLocks(store)
    await locks.after_settle(payload, Filing("dead", payload.copy(), 0.0, terminal=True),
                             ran=True)
