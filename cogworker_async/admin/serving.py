"""Which queues no live process serves. A job on such a queue waits, silently, for a
worker that is not coming (a typo in ``options(queue=...)``, a queue no deploy starts a
worker for): the dashboard, ``stats``, ``queues`` and their ``--json`` mark the queue, so
that the wait has a name (issue 45, item 2; the enqueue's warning is
``enqueue/unknown_queue.py``).

The decision is pure (``unserved``); ``mark_unserved`` applies it to the queue rows the
admin model builds once for every view (``Queues.infos``).

A live process is one whose alive marker holds a beat's TTL (``Admin.processes``); the
queues it serves are the ones its last beat named. A live process whose beat names none
(one too old to say, a damaged beat) counts as serving every queue: a false "unserved"
sends a user looking for a worker that is there, a missed one only leaves things as
they were before the mark existed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

from cogworker_async.admin.records import ProcessInfo, QueueInfo

UNSERVED_HINT: Final = "no live worker serves this queue: its jobs wait"
"""What the mark says where it is shown (the dashboard's tooltip, the CLI's legend)."""


def unserved(holding: Iterable[str],
             served: Iterable[Collection[str] | None]) -> frozenset[str]:
    """The queues of ``holding`` (those with jobs waiting to run) that no live process
    serves. ``served``: each live process's queues, None for one whose beat does not say
    (taken to serve them all)."""
    if isinstance(holding, str):
        raise TypeError("holding must be queue names, not one string")
    covered: set[str] = set()
    for queues in served:
        if queues is None:
            return frozenset()
        if isinstance(queues, str):
            raise TypeError(f"a process's queues must be names, not one string: {queues!r}")
        covered.update(queues)
    return frozenset(holding) - covered


def has_jobs_to_run(info: QueueInfo) -> bool:
    """Queued jobs, or scheduled and retry jobs due now: what a worker would take. Jobs
    scheduled later, and jobs waiting for their parents, do not count (nothing is late
    for them yet)."""
    return info.size > 0 or info.due > 0


def served_by_live(processes: Iterable[ProcessInfo]) -> list[list[str] | None]:
    """The queues each live process serves; None where its beat names none."""
    return [list(process.queues) or None for process in processes if process.alive]


def served_by_beats(beats: Iterable[Mapping[str, Any] | None]) -> list[list[str] | None]:
    """``served_by_live`` from the live processes' beats alone (``Admin.live_beats``),
    read as ``records.process_info`` reads a beat's queues: the same mark either way."""
    found: list[list[str] | None] = []
    for beat in beats:
        queues = (beat or {}).get("queues")
        found.append([str(q) for q in queues] or None if isinstance(queues, list) else None)
    return found


def mark_unserved(infos: Sequence[QueueInfo],
                  processes: Iterable[ProcessInfo]) -> list[QueueInfo]:
    """``infos`` with ``unserved`` set on those that hold jobs no live process serves."""
    return mark_unserved_by(infos, served_by_live(processes))


def mark_unserved_by(infos: Sequence[QueueInfo],
                     served: Iterable[Collection[str] | None]) -> list[QueueInfo]:
    """``mark_unserved`` given what each live process serves (``served_by_beats``)."""
    names = unserved((info.name for info in infos if has_jobs_to_run(info)), served)
    return [dataclasses.replace(info, unserved=info.name in names) for info in infos]
