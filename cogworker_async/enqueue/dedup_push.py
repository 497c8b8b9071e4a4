"""The enqueue of a job of a dedup mode (``jobs/dedup.py``): prepared as any enqueue (checked,
built, through the client middleware), then taken by the backend (``backend.py``): on
Redis, pushed by the mode's own script (``redis/dedup.py``, ``backend.dedup_push``), which
keeps its rule in the same step."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from cogworker_async.enqueue.backend import Backend, DedupCall, Push
from cogworker_async.jobs import dedup

if TYPE_CHECKING:
    from cogworker_async.jobs.definition import Delay, JobDefinition, JobOptions, When


class Enqueuing(Protocol):
    """What ``enqueue`` needs of the client (``client.Client``)."""

    backend: Backend
    settings: Any

    @staticmethod
    def _due(delay: Delay | None, at: When | None) -> tuple[float | None, float | None]: ...
    async def _prepare(self, definition: JobDefinition, options: JobOptions,
                       args: Sequence[Any], kwargs: Mapping[str, Any],
                       due: float | None = None) -> Any: ...


async def enqueue(client: Enqueuing, definition: JobDefinition, options: JobOptions,
                  args: Sequence[Any], kwargs: Mapping[str, Any], delay: Delay | None,
                  at: When | None) -> str | None:
    """One enqueue of a dedup mode: its rule kept by its push's script; the jid that runs
    it (None: a throttled duplicate)."""
    mode, seconds = dedup.mode_of(options) or ("", 0.0)
    dedup.check_call(mode, scheduled=delay is not None or at is not None,
                     tracked=client.settings.tracked)
    epoch, later = client._due(delay, at)
    due = epoch if later is None else time.time() + later
    if mode == "debounce":  # it may first start S seconds from now: ``expires_in`` counts
        due = time.time() + seconds  # from then, as an ``enqueue_in``'s does
    push: Push | None = await client._prepare(definition, options, args, kwargs, due)
    if push is None:
        return None
    push.raw, jid_at = dedup.placed(push.raw, push.jid)  # where a merge writes its jid
    if mode == "coalesce":
        push.raw = dedup.mark(push.raw)
    call = DedupCall(mode, seconds, dedup.digest(definition.name, options, args, kwargs),
                     definition.name, epoch, later, due, jid_at)
    return await client.backend.dedup(push, options, call)
