"""Settlement: applying a job's disposition in Redis, and remembering what could not be.

Every settle script is idempotent (an LPOS guard, or LREM), so a settle is retried a few
times on a connection error. If it still fails, the outcome is remembered in the
ledger's ``pending`` (``raw -> Ack | Filing | GiveBack``) and never mistaken for a job
to run again: on shutdown a pending ack is dropped from the in-progress list (that is
its ack).

An ack needs no list entry: the ledger is told (``acked``: marked ``needless``) the
moment it is decided, before its script is sent, so that a relist never lists it again.

A Filing or a GiveBack needs its job on the list (its script finds it there by exact
bytes, and returns 0 when it is not). What a 0 means:
- after an attempt of this settle whose reply was lost (``ledger.reply_lost``: it is
  ``unsure``, it may have run) — settled by that attempt, unless Redis lost the keys
  meanwhile (a restart cuts connections, so a lost reply and a lost list often come
  together): the outcome waits in ``ledger.doubtful`` for the next beat begun after it;
  ALIVE settles the doubt, FORGOTTEN puts the outcome back in ``pending`` to be
  relisted and settled;
- for a job fencing found recovered elsewhere (``ledger.disowned``) — dropped: not ours;
- otherwise (a first attempt, or after a failure that certainly sent nothing: refused
  by Redis, or a connection that could not even be made) — the job is not listed
  because Redis lost the list (restarted without persistence): the outcome is kept in
  ``pending``, a relist is asked for (``ledger.want_relist``), and the next
  ``settle_pending`` files it (``NotListed``).
Pinned by tests/worker/test_lost_list_settles.py. The window left: a doubtful
outcome when the FORGOTTEN reply of the beat after it is lost too (counted as settled),
or the process stops first (the hand-over does not see it).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Coroutine
from typing import Any, Final

import anyio

from cogworker_async.errors import CogworkerError, why
from cogworker_async.jobs import retries, status, wire
from cogworker_async.redis.errors import RedisError, Unavailable, maybe_ran
from cogworker_async.redis.store import Failure, SetName, Store
from cogworker_async.worker import outcome
from cogworker_async.worker.acks import AckBatcher
from cogworker_async.worker.fetch import Work
from cogworker_async.worker.ledger import Ledger
from cogworker_async.worker.outcome import Ack, Disposition, Filing, GiveBack

log = logging.getLogger(__name__)

ATTEMPTS: Final = 3
RETRY_PAUSE: Final = 0.1
"""Seconds before the second attempt; the third waits twice as long."""

MAX_ENTRY_BYTES: Final = 64 * 1024 * 1024
"""Largest dead or retry entry filed as it was built (a job that ran is filed whatever
its size): past it, the job is filed in dead as its bytes as fetched (``_encoded``)."""


class NotListed(RedisError):
    """A Filing or GiveBack found its job missing from the list (Redis lost it): kept
    pending, and settled once the job is listed again."""


def failure_of(disposition: Filing, target: SetName) -> Failure | None:
    """What a failed job's status record keeps of its failure (None: no jid to file
    it under: an unreadable job)."""
    entry = disposition.entry
    jid = wire.text(entry, "jid")
    if jid is None:
        return None
    runs = (wire.count(entry, "retry_count") or 0) + 1  # the run that failed
    return Failure(jid=jid, error=status.error_text(str(wire.value(entry, "error_class", "")),
                                                    str(wire.value(entry, "error_message", ""))),
                   # The next run's number, read from the entry as filed: a limiter's
                   # reschedule keeps retry_count (it is not a retry).
                   attempt=retries.attempt_of(entry) if target == "retry" else runs,
                   keep=wire.number(entry, "keep_result"))


class Settler:
    def __init__(self, store: Store, identity: str, *, reliable: bool, ledger: Ledger) -> None:
        self.store = store
        self.identity = identity
        self.reliable = reliable
        self.ledger = ledger
        self.acks = AckBatcher(store, identity)

    async def settle(self, work: Work, disposition: Disposition, *,
                     fallback: bool = False) -> None:
        """Apply ``disposition``; never raises (a settle must not stop the worker).
        ``fallback``: this is already the simplest entry, filed after a failure."""
        if isinstance(disposition, Ack):
            self.ledger.acked(work.raw)  # before its script: never relisted
        for attempt in range(1, ATTEMPTS + 1):
            try:
                if isinstance(disposition, Ack) and self.reliable:
                    await self.acks.ack(work.queue, work.raw, work.jid,  # batched
                                        disposition.ended)
                else:
                    await self.apply(work, disposition)
                return
            except NotListed:
                self.ledger.remember(work.raw, disposition, queue=work.queue)
                log.warning("jid=%s was not on this process's list (Redis lost it?): "
                            "listing it again, then settling it", wire.jid_of(work.raw))
                return
            except Unavailable as exc:
                if maybe_ran(exc):
                    self.ledger.reply_lost(work.raw)
                if attempt == ATTEMPTS:
                    self._remember(work, disposition, exc)
                    return
                await anyio.sleep(RETRY_PAUSE * attempt)
            except Exception as exc:  # a bug, not Redis: don't retry the same thing
                log.exception("settling jid=%s failed", wire.jid_of(work.raw))
                if isinstance(disposition, Filing) and not fallback:
                    # The simplest possible entry (the bytes as fetched) cannot fail
                    # the same way: file that instead, never leave a stray to re-run.
                    # Once: what fails for it too (not the entry) is remembered.
                    disposition = outcome.unparseable(
                        work.raw, queue=work.queue, reason=f"settling failed: {exc!r}",
                        now=time.time())
                    await self.settle(work, disposition, fallback=True)
                else:
                    self._remember(work, disposition, exc)
                return

    def record(self, work: Work, disposition: Filing) -> bytes:
        """The hand-over record of a failure that could not be filed (``unsettled``)."""
        target, entry, delay = self._encoded(work, disposition)
        return json.dumps({"set": target, "delay": delay,
                           "payload": entry.decode("utf-8")}).encode()

    async def apply(self, work: Work, disposition: Disposition) -> None:
        """Apply ``disposition`` once; raises ``NotListed`` when a Filing or GiveBack
        finds its job missing from the list (see the module's docstring)."""
        store, identity = self.store, self.identity
        queue = work.queue or self.ledger.queue_of(work.raw)
        if isinstance(disposition, Ack):
            if self.reliable:
                await store.ack(identity, queue,
                                [(work.raw, wire.jid_of(work.raw), disposition.ended)])
        elif isinstance(disposition, Filing):
            target, entry, delay = self._encoded(work, disposition)
            if self.reliable:
                await self._listed(work, disposition, store.file_failure(
                    identity, queue, work.raw, target, entry, delay,
                    failure=failure_of(disposition, target)))
            else:
                await store.file_entry(queue, target, entry, delay)
        elif self.reliable:
            await self._listed(work, disposition, store.give_back(identity, queue, work.raw))
        else:
            await store.push_back(queue, work.raw)

    async def _listed(self, work: Work, disposition: Filing | GiveBack,
                      script: Coroutine[Any, Any, bool]) -> None:
        """Run a settle script that needs its job listed, never while a relist is on its
        way; its 0 read as the module's docstring says."""
        ledger, raw = self.ledger, work.raw
        try:
            await ledger.settle_turn()
            ledger.settle_began(raw)
            done = await script
        finally:
            script.close()  # never awaited if cancelled while waiting its turn
            ledger.settle_ended(raw)
        if not done and raw not in ledger.disowned:
            if raw not in ledger.unsure:
                ledger.want_relist()
                raise NotListed(f"jid={wire.jid_of(raw)} is not on the in-progress list")
            ledger.doubt(raw, disposition, work.queue or ledger.queue_of(raw))
        ledger.left_list(raw)  # off the list: a relist must not put it back

    @staticmethod
    def _encoded(work: Work, disposition: Filing) -> tuple[SetName, bytes, float]:
        """The entry to file, as bytes: where it goes, the entry, the delay.

        An entry that cannot be written back as JSON goes to dead with the job's bytes
        as fetched. Python's parser reads ``NaN``, ``Infinity`` and ``1e999``, which
        ``wire.encode`` refuses: escaping, that error would stop the worker, and the job,
        requeued by the hand-over, every worker that fetched it
        (tests/worker/units/test_settler.py::test_an_entry_that_is_not_json_still_reaches_dead).
        """
        try:
            entry = wire.encode(disposition.entry, MAX_ENTRY_BYTES)
        except CogworkerError as exc:  # SerializationError, PayloadTooLarge
            failed = disposition.entry
            reason = (f"{wire.value(failed, 'error_class')}: "
                      f"{wire.value(failed, 'error_message')} "
                      f"(and its entry could not be written as JSON: {exc})")
            queue = work.queue or str(wire.value(failed, "queue") or "")
            fallback = wire.unparseable_entry(work.raw, queue=queue, reason=reason,
                                             now=time.time())
            fallback["jid"] = wire.value(failed, "jid", fallback["jid"])
            fallback["error_class"] = wire.value(failed, "error_class", fallback["error_class"])
            log.error("jid=%s: %s; filed in dead with its bytes as fetched",
                      wire.jid_of(work.raw), reason)
            # No size limit here: the raw bytes are all there is left of the job.
            return "dead", wire.encode(fallback, wire.NO_SIZE_LIMIT), 0.0
        return disposition.target, entry, disposition.delay

    def _remember(self, work: Work, disposition: Disposition, exc: Exception) -> None:
        jid = wire.jid_of(work.raw)
        if isinstance(disposition, GiveBack):
            # Still on the in-progress list: requeued with the rest at shutdown.
            log.error("couldn't give back jid=%s (left in progress): %s", jid, why(exc))
            return
        if not self.reliable:
            log.error("couldn't settle jid=%s (basic fetch: outcome lost): %s", jid, why(exc))
            return
        self.ledger.remember(work.raw, disposition, queue=work.queue)
        log.error("couldn't settle jid=%s, will retry (it is not run again): %s", jid, why(exc))
