"""The holds of batch blocks judged rightly (issue 40, defect 1, after a hostile review of
7bbfca1 and f1ce9a0): a live block is never let go of — a worker's after Redis lost its
alive marker, one in a worker's lifespan exit, a worker's block on another App's batch,
a block outside a worker busy in its child block — while a dead one still is.

Each test is what a user sees: the block's batch stays open and its next add is taken."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import pytest

from cogworker_async import App
from cogworker_async.redis.batches import BatchEnded
from cogworker_async.worker.batch_reaper import BatchReaper

pytestmark = pytest.mark.timeout(120)

WAIT: Final = 15.0
OTHER: Final = "another-worker:1:abc"
"""The identity of another live worker, whose relay pass judges this one's blocks."""


# -- (1) a worker's lifespan exit: its blocks name a process that has already retired ---


async def test_a_block_in_the_lifespan_exit_is_not_let_go_while_it_runs(
    make_app: Callable[..., App],
) -> None:
    """``manager.run`` sets ``batch.OWNER`` in its own task and never resets it; the
    lifespan's exit runs in that task after the process retired (alive marker and last
    beat deleted): a block there names a process every other relay judges gone."""
    app = make_app(track_jobs=True)
    seen: dict[str, Any] = {}

    @app.job(name="work", retry=0)
    async def work(n: int) -> int:
        return n

    @app.lifespan
    async def life() -> AsyncIterator[dict[str, Any]]:
        yield {}
        try:
            async with app.batch() as batch:  # e.g. a last flush, as one batch
                await work.enqueue_in(3600, 1)
                seen["released"] = await BatchReaper(app.store(), OTHER).reap()
                seen["state"] = (await app.batch_status(batch.bid)).state
                await work.enqueue_in(3600, 2)
        except BatchEnded as exc:
            seen["refused"] = exc

    async with app.worker():
        pass
    assert (seen["released"], seen["state"]) == (0, "open"), seen
    assert "refused" not in seen, seen["refused"]
