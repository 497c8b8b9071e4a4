"""The conformance suite's one fixture: ``backend``, once on a real Redis with a real
worker, once on ``jobs.testing.fake()`` with ``drain()`` (no server at all: its App's URL
reaches nothing, so a faked path that touched Redis fails at once).

A scenario is written once against ``Backend``: make the App, register its jobs,
enqueue, ``await backend.run(until=...)``, then assert what a user sees (the order the
jobs ran in, their status, what an enqueue returned). When the fake and Redis disagree,
the fake is wrong: it claims to behave as Redis does (docs/guides/testing.md).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack
from typing import Any, Final

import pytest

from cogworker_async import App
from tests.conftest import FAST
from tests.waiting import wait_until

NO_REDIS: Final = "unix:///nonexistent/cogworker-conformance.sock"
"""The fake's App URL: nothing listens, so any Redis call it makes raises."""
TIMEOUT: Final = 20.0
"""Seconds a real worker gets to reach a scenario's end."""

Until = Callable[[], bool | Awaitable[bool]]


class Backend:
    """One way to run a scenario's jobs: ``"redis"`` or ``"fake"``."""

    def __init__(self, name: str, redis_url: str | None, stack: ExitStack) -> None:
        self.name = name
        self._url = redis_url
        self._stack = stack
        self.apps: list[App] = []

    @property
    def fake(self) -> bool:
        return self.name == "fake"

    def app(self, **settings: Any) -> App:
        """The scenario's App (fast worker settings; in a fake() block for the fake)."""
        namespace = f"conformance-{uuid.uuid4().hex[:12]}"
        app = App(self._url or NO_REDIS, namespace=namespace, **{**FAST, **settings})
        self.apps.append(app)
        if self.fake:
            self._stack.enter_context(app.testing.fake())
        return app

    async def run(self, app: App, until: Until) -> None:
        """Run the jobs until ``until()`` holds: a worker on Redis (bounded wait), or a
        drain of everything due, scheduled jobs included, then ``until()`` must hold."""
        if self.fake:
            await app.testing.drain(include_scheduled=True)
            assert await _holds(until), "the fake's drain ended before the scenario did"
            return
        async with app.worker():
            await wait_until(until, timeout=TIMEOUT)


async def _holds(until: Until) -> bool:
    result = until()
    return bool(await result) if isinstance(result, Awaitable) else bool(result)


@pytest.fixture(params=["redis", "fake"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    with ExitStack() as stack:
        made = Backend(request.param, url, stack)
        yield made
        stack.close()  # leave the fake() blocks before the Apps close
        for app in made.apps:
            await app.close()


def only_redis(backend: Backend, why: str) -> None:
    """Skip a scenario the fake does not claim (docs/guides/testing.md says which)."""
    if backend.fake:
        pytest.skip(f"not claimed by the fake: {why}")

