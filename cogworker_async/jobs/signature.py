"""Signatures: a job and its arguments, as a value — ``report.s(month, final=True)``.

What a batch's callbacks are (``jobs.batch(on_complete=report.s(...))``), and what a
chain links. The arguments are checked where the signature is made, as an enqueue checks
them (they fit the function, JSON brings them back as they were), so a bad callback is a
``TypeError`` at the call, never a dead job when the batch ends.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cogworker_async.jobs import wire
from cogworker_async.jobs.definition import JobDefinition, JobOptions
from cogworker_async.jobs.groups import group_for
from cogworker_async.jobs.priority import MAX_PRIORITY, MIN_PRIORITY


class EnqueueTarget(Protocol):
    """What a signature needs of a job's enqueue methods (``enqueue/handles.py``'s
    ``Enqueuer``; named apart from it: this is only the part a signature calls)."""

    @property
    def definition(self) -> JobDefinition: ...

    @property
    def job_options(self) -> JobOptions: ...

    @property
    def namespace(self) -> str: ...

    async def enqueue(self, /, *args: Any, **kwargs: Any) -> str | None: ...

    async def prepared(self, /, *args: Any, **kwargs: Any) -> Any: ...

    def prepared_sync(self, /, *args: Any, **kwargs: Any) -> Any: ...

    def options(self, *, keep_result: float | None = None, after: Iterable[str] | None = None,
                pass_result: bool | None = None) -> EnqueueTarget: ...


@dataclass(frozen=True, slots=True)
class Signature:
    """A job (with its options) and the arguments of one run of it."""

    enqueuer: EnqueueTarget = field(repr=False)
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    incomplete: str | None = field(default=None, repr=False, compare=False)
    """Why the arguments do not fit the function alone, when they do with one more first
    argument (a chain's step that takes the result before it); None: they fit."""

    @property
    def name(self) -> str:
        return self.enqueuer.definition.name

    @property
    def queue(self) -> str:
        return self.enqueuer.job_options.queue

    async def enqueue(self) -> str | None:
        """Enqueue this run now; its jid."""
        return await self.enqueuer.enqueue(*self.args, **self.kwargs)

    async def prepared(self) -> Any:
        """This run checked and built as an enqueue would push it (``client.Push``: its
        queue, raw job and jid), not pushed (``outbox/__init__.py``); None if a middleware
        refused it."""
        return await self.enqueuer.prepared(*self.args, **self.kwargs)

    def prepared_sync(self) -> Any:
        """``prepared`` for code that is not async."""
        return self.enqueuer.prepared_sync(*self.args, **self.kwargs)

    def stored(self) -> dict[str, Any]:
        """What a batch keeps of it, to enqueue when it ends (``worker/notes_relay.py``)."""
        options = self.enqueuer.job_options
        group = options.group
        key = options.group_key if options.group_key is not None \
            else self.enqueuer.definition.group_key
        if group is None and key is not None:  # group=fn: named now, from its arguments
            group = group_for(key, list(self.args), dict(self.kwargs), self.name)
        return {"name": self.name, "args": list(self.args), "kwargs": dict(self.kwargs),
                "queue": self.queue, "retry": options.retry,
                "keep_result": options.keep_result,
                **({"priority": options.priority} if options.priority else {}),
                **({"group": group} if group else {}),
                **({"timeout": options.timeout} if options.timeout is not None else {}),
                # the deadline counts from the callback's own enqueue, as an enqueue's
                **({"expires_in": options.expires_in} if options.expires_in else {}),
                **({"expires_at": options.expires_at} if options.expires_at else {}),
                **({} if options.dead_on_expiry else {"dead_on_expiry": False})}

    def __repr__(self) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}.s({', '.join(shown)})"


def callback_jid(bid: str, kind: str) -> str:
    """The jid a batch's callback of ``kind`` is enqueued with (once: ``enqueue.lua``)."""
    return f"{bid}-{kind}"


def callback_payload(definition: JobDefinition, stored: Mapping[str, Any], bid: str,
                     kind: str, now: float) -> wire.Payload:
    """The job a batch's stored callback (``Signature.stored``) is enqueued as: by the
    relay (``worker/notes_relay.py``) and by the testing fake alike."""
    options = definition.options
    retry = stored.get("retry", options.retry)
    priority = stored.get("priority", options.priority)
    group = stored.get("group", options.group)
    expires_in, expires_at = _seconds(stored.get("expires_in")), _seconds(stored.get("expires_at"))
    timeout = _seconds(stored.get("timeout"))
    deadline = expires_at or (now + expires_in if expires_in else None)
    payload = wire.build(definition.name, stored.get("args", []), stored.get("kwargs", {}),
                        queue=stored.get("queue") or options.queue,
                        retry=retry if isinstance(retry, bool | int) else options.retry,
                        now=now, jid=callback_jid(bid, kind),
                        keep_result=stored.get("keep_result", options.keep_result), bid=bid,
                        priority=priority if type(priority) is int
                        and MIN_PRIORITY <= priority <= MAX_PRIORITY else options.priority,
                        group=group if isinstance(group, str) and group else options.group,
                        timeout=timeout if timeout is not None else options.timeout,
                expires_at=deadline, dead_on_expiry=stored.get("dead_on_expiry") is not False)
    payload["batch_callback"] = kind
    return payload


def _seconds(value: object) -> float | None:
    """A stored callback's field as a positive number of seconds, else None (a batch
    hash is data another client could have written: anything else is ignored)."""
    if isinstance(value, int | float) and not isinstance(value, bool) \
            and 0 < value < math.inf:
        return float(value)
    return None


def make(enqueuer: EnqueueTarget, args: Sequence[Any], kwargs: Mapping[str, Any],
         max_bytes: int) -> Signature:
    """A checked signature: TypeError/ValueError naming what does not fit."""
    definition = enqueuer.definition
    incomplete = None
    try:
        definition.check_arguments(args, kwargs)
    except TypeError as exc:
        try:  # a step of a chain with pass_result: the result comes first
            definition.check_arguments((None, *args), kwargs)
        except TypeError:
            raise exc from None
        incomplete = str(exc)
    wire.encode_new(wire.build(definition.name, args, kwargs, queue=enqueuer.job_options.queue,
                             retry=enqueuer.job_options.retry, now=0.0), max_bytes)
    return Signature(enqueuer, tuple(args), dict(kwargs), incomplete)


def check(value: object, what: str, *, takes_result: bool = False,
          step: bool = False) -> Signature | None:
    """``value`` if it is a signature (or None) whose arguments fit its function —
    with one more first argument, ``takes_result`` —; a TypeError naming ``what``
    otherwise. Not a chain's ``step``: a batch's callback, which must carry all its
    options (a ValueError naming one it cannot)."""
    if value is None:
        return None
    if not isinstance(value, Signature):
        raise TypeError(f"{what} must be a signature (job.s(*args, **kwargs)), not "
                        f"{type(value).__name__}: {value!r}")
    if not step:
        refused = not_carried(value.enqueuer.job_options)
        if refused:
            raise ValueError(f"{what} ({value!r}): a batch's callback is enqueued once, "
                             f"under a jid of its batch's, when the batch ends: it cannot "
                             f"take {', '.join(refused)}")
    if takes_result and value.incomplete is None:
        value.enqueuer.definition.check_arguments((None, *value.args), value.kwargs)
    if not takes_result and value.incomplete is not None:
        raise TypeError(f"{what}: {value.incomplete}")
    return value


def not_carried(options: JobOptions) -> list[str]:
    """The options of a callback's signature that its enqueue by the relay cannot honour
    (named as ``options()`` takes them): refused where the signature is given, never
    dropped when the batch ends."""
    dedup = [name for name, on in (("throttle", options.throttle is not None),
                                   ("debounce", options.debounce is not None),
                                   ("coalesce", options.coalesce)) if on]
    return [*(["unique"] if options.unique is not None else []),
            *(["jid"] if options.jid is not None else []),
            *(["after="] if options.after else []),
            *(["pass_result"] if options.pass_result else []), *dedup]
