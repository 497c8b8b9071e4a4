"""What the fake does not claim: on Redis it works; in the fake it raises ``NotFaked``
(never an answer that differs from Redis'). docs/guides/testing.md lists the claims."""

from __future__ import annotations

import time

import pytest

from cogworker_async.admin import Inspector
from cogworker_async.testing import NotFaked
from tests.conformance.conftest import Backend
from tests.waiting import wait_until


async def test_priority_aging_runs_a_long_waiting_job_first(backend: Backend) -> None:
    app = backend.app(concurrency=1, priority_aging=0.05)
    ran: list[str] = []

    @app.job
    async def work(tag: str) -> None:
        ran.append(tag)

    await work.enqueue("old, priority 0")
    since = time.time()
    await wait_until(lambda: time.time() - since > 0.3, timeout=5)  # six levels' worth
    await work.options(priority=2).enqueue("new, priority 2")
    if backend.fake:
        with pytest.raises(NotFaked, match="priority aging"):
            await app.testing.drain()
        return
    await backend.run(app, until=lambda: len(ran) == 2)
    assert ran == ["old, priority 0", "new, priority 2"]


async def test_the_admin_reads_need_redis(backend: Backend) -> None:
    """Pause and a limiter entered outside a job are faked now (test_pause_limits.py);
    the admin reads are not."""
    app = backend.app()
    queues = Inspector(app).queues
    if backend.fake:
        with pytest.raises(NotFaked, match="admin"):
            await queues.names()
        return
    assert isinstance(await queues.names(), list)
