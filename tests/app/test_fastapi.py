"""Embedding: a worker in a real FastAPI app's lifespan, jobs enqueued from a route."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from cogworker_async import App
from cogworker_async.redis.store import Store
from tests.waiting import wait_until


async def test_worker_in_a_fastapi_lifespan(make_app: Callable[..., App], store: Store) -> None:
    jobs = make_app()
    sent: list[str] = []

    @jobs.job()
    async def send_email(to: str) -> None:
        sent.append(to)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with jobs.worker(concurrency=5):
            yield

    api = FastAPI(lifespan=lifespan)

    @api.post("/signup")
    async def signup(email: str) -> dict[str, str | None]:
        return {"jid": await send_email.enqueue(email)}

    async with LifespanManager(api) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            response = await client.post("/signup", params={"email": "a@example.com"})
            assert response.status_code == 200
            assert len(response.json()["jid"]) == 24
            await wait_until(lambda: sent == ["a@example.com"])
    # The lifespan's end stopped the worker and left nothing in progress.
    assert [key async for key in store.client.scan_iter(match=store.keys.in_progress_pattern)
            ] == []
