"""Middleware: plain async callables around an enqueue (client) and around a run (server).

    async def tag_tenant(enqueue: Enqueue, call_next: EnqueueNext) -> str | None:
        enqueue.payload["tenant"] = current_tenant()
        return await call_next(enqueue)        # return None to refuse the push

    async def timing(job: JobContext, call_next: RunNext) -> None:
        began = time.monotonic()
        try:
            await call_next(job)               # raise to fail the job
        finally:
            metrics.observe(job.name, time.monotonic() - began)

    jobs.add_client_middleware(tag_tenant)
    jobs.add_server_middleware(timing)

Client middleware runs in the enqueuing process before the push (it may change the
payload, which must stay JSON); server middleware runs in the worker around the job
function. Built-in behaviours use the same chains: unique jobs mark the payload in the
client chain (the lock itself is taken atomically with the push), and the processed and
failed counts are kept by a server middleware.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cogworker_async.jobs.context import JobContext
from cogworker_async.jobs.definition import JobDefinition, JobOptions


@dataclass(slots=True)
class Enqueue:
    """One job about to be pushed."""

    name: str
    payload: dict[str, Any]
    """Mutable: what will be stored (it must stay JSON-serialisable). The fields this
    package writes are ``wire.Payload``'s; a middleware may add fields of its own."""
    options: JobOptions
    """The options this enqueue uses (queue, retry, unique, ...)."""
    definition: JobDefinition
    """The registered job."""


EnqueueNext = Callable[[Enqueue], Awaitable[str | None]]
ClientMiddleware = Callable[[Enqueue, EnqueueNext], Awaitable[str | None]]
RunNext = Callable[[JobContext], Awaitable[None]]
ServerMiddleware = Callable[[JobContext, RunNext], Awaitable[None]]


def client_chain(middlewares: Sequence[ClientMiddleware], final: EnqueueNext) -> EnqueueNext:
    """``final`` wrapped by ``middlewares`` (the first listed runs first)."""
    call = final
    for middleware in reversed(middlewares):
        call = _bind_client(middleware, call)
    return call


def server_chain(middlewares: Sequence[ServerMiddleware], final: RunNext) -> RunNext:
    """``final`` wrapped by ``middlewares`` (the first listed runs first)."""
    call = final
    for middleware in reversed(middlewares):
        call = _bind_server(middleware, call)
    return call


def _bind_client(middleware: ClientMiddleware, call_next: EnqueueNext) -> EnqueueNext:
    async def call(enqueue: Enqueue) -> str | None:
        return await middleware(enqueue, call_next)

    return call


def _bind_server(middleware: ServerMiddleware, call_next: RunNext) -> RunNext:
    async def call(job: JobContext) -> None:
        await middleware(job, call_next)

    return call
