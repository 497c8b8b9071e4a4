"""Dependents: enqueueing a job that runs after others (``options(after=[...])``).

    first = await fetch.enqueue(url)
    await parse.options(after=[first], pass_result=True).enqueue()   # parse(<fetch's result>)

The caller's side of ``redis/dependencies.py``: find each parent's queue (a jid names a
job, not its queue), refuse an unknown parent at the call, then put the job waiting
(``wait``) and watch its parents (``arm``). A parent that already ended is applied at
once; one that ends later is noted by its own settle script and relayed by the workers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final, Protocol

from cogworker_async.enqueue.lookup import JobLookup
from cogworker_async.errors import UNTRACKED, ConfigurationError
from cogworker_async.jobs.definition import JobOptions
from cogworker_async.jobs.status import JobStatus
from cogworker_async.redis.dependencies import ARM_GRACE, Parent
from cogworker_async.redis.errors import Unavailable
from cogworker_async.redis.store import Store

log = logging.getLogger(__name__)

RESULT_SLOT: Final = "\x00cogworker-async:parent-result\x00"
"""The placeholder first argument of a job that takes its parent's result: checked and
encoded like any argument, then cut out of the raw job (``split``), whose two halves
``dep_apply.lua`` joins around the parent's result."""
_SLOT_JSON: Final = b'"\\u0000cogworker-async:parent-result\\u0000"'


def split(raw: bytes) -> tuple[bytes, bytes]:
    """A raw job with ``RESULT_SLOT`` as its first argument, as the text before and after
    it."""
    head, found, tail = raw.partition(b'"args":[' + _SLOT_JSON)
    if not found:
        raise ValueError("the job's first argument was changed on its way (a client "
                         "middleware?): pass_result cannot place the parent's result")
    return head + b'"args":[', tail


def check_call(options: JobOptions, *, scheduled: bool, tracked: bool) -> None:
    """What cannot be combined with ``after=``: a ValueError (or the untracked
    ConfigurationError) at the call."""
    if scheduled:
        raise ValueError("after= cannot be combined with enqueue_in/enqueue_at: the job "
                         "runs as soon as its parents succeeded")
    if options.unique is not None:
        raise ValueError("after= cannot be combined with unique")
    if options.jid is not None and options.jid in options.after:
        raise ValueError(f"after= names the job's own jid {options.jid!r}: it would wait "
                         "for itself")
    if not tracked:
        raise ConfigurationError(UNTRACKED)


def arguments(options: JobOptions, args: Sequence[Any]) -> Sequence[Any]:
    """The arguments to check and encode: with ``pass_result``, the placeholder first."""
    return (RESULT_SLOT, *args) if options.pass_result else args


class StatusLookup(Protocol):
    """What finding a parent needs: a jid's status, with its queue (``JobLookup``; the
    testing fake's world)."""

    async def status(self, jid: str) -> JobStatus: ...


async def parents_of(lookup: StatusLookup, options: JobOptions) -> list[Parent]:
    """Each jid of ``options.after`` with its queue; a ValueError naming any that is
    unknown (never enqueued, or ended longer ago than its record is kept), or a parent
    whose result ``pass_result`` takes that succeeded keeping none."""
    parents, unknown = [], []
    for jid in options.after:
        status = await lookup.status(jid)
        if status.state == "unknown" or status.queue is None:
            unknown.append(jid)
        else:
            parents.append(Parent(status.queue, jid))
        if options.pass_result and status.state == "succeeded" and not status.has_result:
            raise ValueError(f"pass_result: parent {jid} succeeded keeping no result (its "
                             "keep_result, or it expired): there is none to pass")
    if unknown:
        raise ValueError(f"after= names jobs that are not known: {unknown!r} (never "
                         "enqueued; enqueued through the outbox and not relayed yet: wait until "
                         "status() knows it; or ended longer ago than keep_status)")
    return parents


class Pushed(Protocol):
    """The job to put waiting (``client.Push``)."""

    queue: str
    jid: str
    raw: bytes


class InBatch(Protocol):
    """The batch the job joins (``context.OpenBatch``)."""

    @property
    def bid(self) -> str: ...


async def wait(store: Store, lookup: JobLookup, options: JobOptions, push: Pushed, *,
               name: str, batch: InBatch | None, max_bytes: int = 0) -> bool:
    """Put job ``push`` waiting for ``options.after`` (a member of ``batch``); False if
    refused (a chosen jid that is alive). ``max_bytes``: max_payload_bytes, which a
    parent's result must not take the job over (filed dead, saying so)."""
    queue, jid, raw = push.queue, push.jid, push.raw
    bid = batch.bid if batch is not None else None
    parents = await parents_of(lookup, options)
    chosen = options.jid is not None
    if chosen and await _alive_elsewhere(store, queue, jid):
        return False
    takes = parents[0] if options.pass_result else None
    head, tail = split(raw) if takes is not None else (raw, b"")
    deps = store.dependencies
    if not await deps.wait(queue, jid, head, parents,
                           policy=options.on_parent_failure,  # type: ignore[arg-type]
                           takes_result_of=takes, name=name, batch=bid,
                           chosen=chosen, tail=tail):
        return False
    # From here the job exists: a death (or Redis failing) before its parents are all
    # watched leaves it in ``arming``, and the relay arms it (ARM_GRACE). The enqueue has
    # happened: it returns the jid, so that a caller never enqueues it again.
    try:
        await deps.arm(queue, jid, parents, takes, max_bytes=max_bytes)
    except Unavailable as exc:
        log.warning("%s is enqueued, waiting for %s; watching its parents failed (%s): "
                    "the workers watch them within %.0f s", jid,
                    [p.jid for p in parents], exc, ARM_GRACE)
    return True


async def _alive_elsewhere(store: Store, queue: str, jid: str) -> bool:
    """Whether a chosen jid is alive in another queue (``dep_wait`` checks its own, in
    its step), as a plain enqueue asks (``Client._alive_elsewhere``)."""
    others = [name for name in await store.queue_names() if name != queue]
    return bool(others) and bool(await store.alive_in(jid, others))
