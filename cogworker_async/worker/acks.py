"""Ack batching: jobs that finish at about the same time are acknowledged in one call.

One script call per job would cap a worker near one round trip per job. Instead the
first job to finish sends its ack at once, and the acks of the jobs that finish while
that call is in flight go together in the next one (``ack.lua`` takes many). Nothing
waits for a timer, so an idle worker's single ack is one round trip. Each job waits for
its own ack to be recorded before its processor moves on, and a failed call fails every
ack in it, which the settler then retries or remembers.
"""

from __future__ import annotations

import asyncio
from typing import Final

from cogworker_async.jobs.status import SUCCEEDED, Ended
from cogworker_async.limits.waiters import settle_all
from cogworker_async.redis.errors import LostReply
from cogworker_async.redis.store import Store

MAX_BATCH: Final = 500
"""Acks sent in one script call at most."""

_Waiting = tuple[str, bytes, str | None, Ended, "asyncio.Future[None]"]


class AckBatcher:
    def __init__(self, store: Store, identity: str) -> None:
        self.store = store
        self.identity = identity
        self._waiting: list[_Waiting] = []
        self._flushing = False

    async def ack(self, queue: str, raw: bytes, jid: str | None,
                  ended: Ended = SUCCEEDED) -> None:
        """Record that ``raw`` (fetched from ``queue``) ran, and how it ``ended``; raises
        what the script call raised."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((queue, raw, jid, ended, done))
        if not self._flushing:
            await self._flush()
        await done

    async def _flush(self) -> None:
        self._flushing = True
        try:
            while self._waiting:
                batch = self._waiting[:MAX_BATCH]
                del self._waiting[:MAX_BATCH]
                by_queue: dict[str, list[_Waiting]] = {}
                for waiting in batch:  # one call per queue: each list is in its slot
                    by_queue.setdefault(waiting[0], []).append(waiting)
                for queue, acks in by_queue.items():
                    try:
                        await self.store.ack(self.identity, queue,
                                             [(raw, jid, ended) for _, raw, jid, ended, _ in acks])
                    except Exception as exc:
                        settle_all(acks, exc)
                    else:
                        settle_all(acks, None)
        finally:
            self._flushing = False
            # Cancelled or stopped mid-flight: whoever is still waiting must not wait
            # forever; as an uncertain reply, the settler retries (acks are idempotent).
            left, self._waiting = self._waiting, []
            settle_all(left, LostReply("ack flush interrupted"))
