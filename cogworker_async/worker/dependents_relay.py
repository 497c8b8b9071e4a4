"""The relay's side of dependencies: a watched parent's end, told to each job waiting
for it (``redis/dependencies.py``), from the note its settle script wrote.

The note names its watchers (``*``: the parent's watchers set, read here in pages); each
hears the end (``dep_apply.lua``: an end counts once), with the parent's result for the
one that takes it; then they leave the set, so that a parent retried from dead tells its
next end only to whoever watches it then. A step that fails keeps the note: it is told
again next pass.
"""

from __future__ import annotations

import json
import logging

from cogworker_async.redis.batches import Note
from cogworker_async.redis.dependencies import Parent
from cogworker_async.redis.part import wrong_type
from cogworker_async.redis.store import Store

log = logging.getLogger(__name__)


async def tell(store: Store, queue: str, note: Note, max_bytes: int) -> None:
    """Parent ``note.jid`` of ``queue`` ended ``note.end``: each job watching it hears
    it; a job released with its parent's result is refused over ``max_bytes``."""
    parent = Parent(queue, note.jid)
    deps = store.dependencies
    watchers = await deps.watchers(parent, note.watchers)
    result: str | None = None
    for watcher in watchers:
        if watcher.takes_result and note.end == "succeeded" and result is None:
            result = await result_of(store, parent)
        try:
            await deps.apply(
                watcher.queue, watcher.jid,
                [(parent, note.end, result if watcher.takes_result and result else "")],
                max_bytes=max_bytes)
        except Exception as exc:
            if not wrong_type(exc):
                raise  # the note is kept: told again next pass (an end counts once)
            log.error("notes relay: job %s cannot hear that its parent %s %s (%s)",
                      watcher.jid, note.jid, note.end, exc)
    await deps.told(parent, watchers)


async def result_of(store: Store, parent: Parent) -> str:
    """The parent's result as JSON, as its record keeps it ("" if it keeps none: the
    job taking it is then filed dead, saying so)."""
    status = await store.job_status(parent.jid, [parent.queue])
    if status is None or not status.has_result:
        return ""
    return json.dumps(status.result, separators=(",", ":"))
