"""Pausing: a queue's pause flag, the Store's side of ``App.pause`` / ``resume``.

The flag is a plain key in the queue's own slot (``Keys.paused``), so ``fetch.lua``
reads it in the same step that would take a job: no worker takes a job from a paused
queue once the flag is set, whatever it had in memory. Enqueues still land. The flag
has no TTL: a pause lasts until someone resumes, through restarts of every process.
A part of the Store.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cogworker_async.jobs import stored
from cogworker_async.redis.part import Part


@dataclass(frozen=True, slots=True)
class Pause:
    """A queue's pause: since when (epoch s) and who asked (host, and what they said)."""

    queue: str
    since: float
    by: str

    @classmethod
    def read(cls, queue: str, raw: bytes | str) -> Pause:
        """The flag's value as stored; one that cannot be read is still a pause (only
        its existence counts for ``fetch.lua``)."""
        fields = stored.json_object(raw)  # damaged (too deep, not UTF-8...): None
        since = stored.number(fields.get("since")) if fields is not None else None
        if fields is None or since is None:
            return cls(queue, 0.0, "")
        by = fields.get("by", "")
        return cls(queue, since, by if isinstance(by, str) else "")


class Pausing(Part):
    async def pause(self, queue: str, by: str = "") -> bool:
        """Pause ``queue``; False if it was paused already (its first pause is kept)."""
        flag = json.dumps({"since": time.time(), "by": by or socket.gethostname()})
        return bool(await self.client.set(self.keys.paused(queue), flag, nx=True))

    async def resume(self, queue: str) -> bool:
        """Resume ``queue`` and wake idle workers (they would otherwise wait up to
        ``idle_fetch_interval``); False if it was not paused."""
        removed = int(await self.client.delete(self.keys.paused(queue)))
        if removed:
            await self._wake_idle()
        return removed > 0

    async def pauses(self, queues: Sequence[str]) -> dict[str, Pause]:
        """The paused ones among ``queues`` (one GET each, pipelined). A flag of another
        type is a pause all the same: ``fetch.lua`` asks only whether it exists."""
        if not queues:
            return {}
        async with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.get(self.keys.paused(queue))
            values: list[Any] = await pipe.execute(raise_on_error=False)
        return {queue: Pause.read(queue, b"" if isinstance(value, Exception) else value)
                for queue, value in zip(queues, values, strict=True) if value is not None}

    async def _wake_idle(self) -> None:
        await self.client.publish(self.keys.wake_channel, "resume")
