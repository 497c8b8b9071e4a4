"""Lookup: asking about a job by its jid — its status, its result, cancelling it.

    status = await jobs.status(jid)          # JobStatus: state, progress, result, error
    value = await jobs.result(jid, timeout=30)
    await jobs.cancel(jid)                   # "cancelled", "stopping", "finished", "unknown"

A jid names a job, not its queue: a record is looked for in every registered queue's
slot (one HGETALL each, in one round trip per node; ``queue=`` names the one to look
in). No queue or set is ever scanned. ``result`` waits for the job's end on pub/sub
(jobs that keep a result publish it) and looks at the record again at a growing
interval whatever it hears, so a lost message, a job that keeps no result or a broken
subscription only makes it slower, never wrong.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any, Final

import anyio

from cogworker_async.errors import UNTRACKED, ConfigurationError, JobCancelled, JobFailed
from cogworker_async.redis.store import RedisError, Store
from cogworker_async.status import CancelOutcome, JobStatus, check_jid, unknown

log = logging.getLogger(__name__)

FIRST_LOOK: Final = 0.05
"""Seconds before ``result`` looks at the record again; doubled each time, up to
``LOOK_EVERY``."""
LOOK_EVERY: Final = 1.0


class JobLookup:
    def __init__(self, store: Callable[[], Store], tracked: bool = True) -> None:
        self._store = store
        self._tracked = tracked

    def _check(self, jid: str) -> None:
        if not self._tracked:
            raise ConfigurationError(UNTRACKED)
        check_jid(jid)

    async def status(self, jid: str, *, queue: str | None = None) -> JobStatus:
        """What became of job ``jid`` (state ``unknown``: never enqueued here, or its
        record expired: ``Settings.keep_status``, or its ``keep_result``)."""
        self._check(jid)
        store = self._store()
        found = await store.job_status(jid, None if queue is None else [queue])
        return found if found is not None else unknown(jid)

    async def cancel(self, jid: str, *, queue: str | None = None) -> CancelOutcome:
        """Cancel job ``jid`` wherever it is (``status.CancelOutcome`` says what each
        answer means). A cancel survives a crash of the process running the job."""
        found = await self.status(jid, queue=queue)
        if found.queue is None:
            return "unknown"
        return await self._store().cancel_job(found.queue, jid)

    async def result(self, jid: str, *, timeout: float | None = None,  # noqa: ASYNC109
                     queue: str | None = None) -> Any:
        """Wait for job ``jid`` to end and return its result (None for a job that keeps
        none). Raises ``JobFailed`` (dead), ``JobCancelled``, ``TimeoutError`` (still
        not ended after ``timeout`` seconds), ``LookupError`` (no such job: never
        enqueued, or its record expired)."""
        self._check(jid)
        if timeout is not None and (not isinstance(timeout, int | float)
                                    or isinstance(timeout, bool) or math.isnan(timeout)
                                    or timeout < 0):
            raise ValueError(f"timeout must be None or seconds >= 0, got {timeout!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        store = self._store()
        async with _Subscription(store, store.keys.finished_channel(jid)) as heard:
            pause = FIRST_LOOK
            while True:
                found = await self.status(jid, queue=queue)
                if found.state == "unknown":
                    raise LookupError(f"no job {jid!r}: never enqueued, or its record "
                                      "expired")
                if found.finished:
                    return _outcome(found)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"job {jid} has not ended after {timeout}s "
                                       f"(it is {found.state})")
                await heard(pause if left is None else min(pause, left))
                pause = min(LOOK_EVERY, pause * 2)


def _outcome(found: JobStatus) -> Any:
    if found.state == "succeeded":
        return found.result
    if found.state == "cancelled":
        raise JobCancelled(f"job {found.jid} was cancelled", found)
    raise JobFailed(f"job {found.jid} is dead: {found.error or 'no error recorded'}", found)


class _Subscription:
    """``async with _Subscription(store, channel) as heard``: ``await heard(seconds)``
    returns on a message on ``channel`` or after ``seconds``. Best effort: without a
    subscription (refused, lost) it just waits."""

    def __init__(self, store: Store, channel: str) -> None:
        self._store = store
        self._channel = channel
        self._pubsub: Any = None

    async def __aenter__(self) -> Callable[[float], Any]:
        try:
            pubsub = self._store.client.pubsub()
            await pubsub.subscribe(self._channel)
            self._pubsub = pubsub
        except (RedisError, OSError) as exc:
            log.debug("result(): no subscription (%s): looking at the record only", exc)
        return self._heard

    async def _heard(self, seconds: float) -> None:
        pubsub = self._pubsub
        if pubsub is None:
            await anyio.sleep(seconds)
            return
        started = time.monotonic()
        try:
            while (left := seconds - (time.monotonic() - started)) > 0:
                message = await pubsub.get_message(ignore_subscribe_messages=True,
                                                   timeout=left)
                if message is not None:
                    return
        except (RedisError, OSError):
            self._pubsub = None  # lost: the record alone from now on
            await self._close(pubsub)

    async def __aexit__(self, *exc_info: object) -> None:
        if self._pubsub is not None:
            await self._close(self._pubsub)

    @staticmethod
    async def _close(pubsub: Any) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await pubsub.aclose()
            except (RedisError, OSError):
                pass
