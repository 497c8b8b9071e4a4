"""``jobs.queues``: pause and resume an App's queues, and read which are paused.

A namespace over the client's backend (``enqueue/backend.py``): Redis' pause flag
(``redis/pausing.py``: why a pause holds from the very next fetch, through restarts),
or the testing fake's pauses inside a ``jobs.testing.fake()`` block. ``App.pause``,
``App.resume`` and ``App.paused`` are the older spellings of these methods (kept:
every public name keeps working).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from cogworker_async.redis.pausing import Pause
from cogworker_async.settings import Settings, check_queue_name

if TYPE_CHECKING:
    from cogworker_async.enqueue.backend import Backend


class AppQueues:
    """An App's queues (``jobs.queues``): ``pause``, ``resume``, ``paused``."""

    def __init__(self, backend: Callable[[], Backend], settings: Settings) -> None:
        self._backend = backend  # the client's current one, asked for at each call
        self._settings = settings

    async def pause(self, queue: str) -> bool:
        """Pause ``queue``: no worker starts a job from it (the fetch script reads the
        flag in the step that would take the job); running jobs finish, enqueues still
        land. Lasts until ``resume``, through restarts. False if it was paused already."""
        return await self._backend().pause(check_queue_name(queue))

    async def resume(self, queue: str) -> bool:
        """Resume a paused ``queue`` (idle workers are woken at once); False if it was
        not paused."""
        return await self._backend().resume(check_queue_name(queue))

    async def paused(self, queues: Sequence[str] | None = None) -> dict[str, Pause]:
        """The paused queues among ``queues`` (default: every registered queue and this
        App's own), each with since when and by whom."""
        names = None if queues is None else [check_queue_name(queue) for queue in queues]
        return await self._backend().pauses(names, self._settings.queue_names)
