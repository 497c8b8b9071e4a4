"""The App's periodic jobs as the admin model shows them: schedule, next run, last run,
running now (``Inspector.periodic``, ``App.periodic_jobs``).

Apart from ``api``: ``App.periodic_jobs`` reads them too, and importing ``api`` (whose
Inspector holds an App) from ``app.py`` made the two an import cycle. So this module
names what it reads of the App as a protocol (``PeriodicSource``), and imports neither.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from cogworker_async.admin.records import PeriodicInfo
from cogworker_async.redis.admin import Admin

if TYPE_CHECKING:
    from cogworker_async.jobs.definition import JobDefinition
    from cogworker_async.jobs.periodic import Periodic
    from cogworker_async.redis.store import Store
    from cogworker_async.settings import Settings


class PeriodicSource(Protocol):
    """What the periodic jobs' view reads of an App (``cogworker_async.app.App``)."""

    @property
    def periodics(self) -> Mapping[str, Periodic]: ...

    @property
    def registry(self) -> Mapping[str, JobDefinition]: ...

    @property
    def settings(self) -> Settings: ...

    def _store(self) -> Store: ...


async def periodic_infos(app: PeriodicSource) -> list[PeriodicInfo]:
    """Each of ``app``'s periodic jobs: its schedule, queue, next run, last run, and
    whether it runs now."""
    periodics = list(app.periodics.values())
    default_queue = app.settings.default_queue
    # Its claims and running lock are in the slot of the queue it is enqueued on.
    queues = {p.name: _queue_of(app, p.name) for p in periodics}
    # No known queues given to Admin (the Inspector's are its App's): the periodic
    # state is read at the keys named here, not from any queue's sets.
    state = await Admin(app._store()).periodic_state(
        [(p.name, queues[p.name] or default_queue) for p in periodics])
    now = time.time()
    infos = []
    for p in periodics:
        last, running = state[p.name]
        queue = queues[p.name] or "?"
        infos.append(PeriodicInfo(name=p.name, schedule=p.schedule, tz=str(p.tz),
                                  queue=queue, next_run=p.next_tick(now), last_run=last,
                                  running=running))
    return infos


def _queue_of(app: PeriodicSource, name: str) -> str | None:
    definition = app.registry.get(name)
    return definition.options.queue if definition is not None else None
