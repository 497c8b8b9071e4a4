"""Review of issue 42's fake port (``enqueue/backend.py``, ``testing/harness.py``): what a
user's test did inside a ``jobs.testing.fake()`` block before the port, with a Redis
reachable, and what it does now.

Before issue 42, ``pause``/``resume``/``paused`` and a limiter entered outside a job
reached Redis inside a block; the port first made them raise ``NotFaked``. A typical
user test hits that without asking for it: a web handler that rate-limits an outbound
call with ``async with jobs.limiter(...)`` and enqueues a job, tested under
``cogworker_fake(jobs)``. Now the fake fakes them (``Backend.limit_store``,
``Backend.pause``/``resume``/``pauses``): they work in a block, and reach no server.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cogworker_async import App, OverLimit
from cogworker_async.redis.pausing import Pause
from cogworker_async.testing import NotFaked
from tests.conformance.conftest import NO_REDIS


async def test_a_limiter_entered_outside_a_job_in_a_fake_block_works_as_before(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    api = app.limiter("outbound-api", concurrent=1)

    @app.job(name="notify")
    async def notify(user: int) -> None: ...

    with app.testing.fake() as testing:
        async with api:  # a web handler's rate limit around its own call
            await notify.enqueue(1)
    assert [job.args for job in testing.enqueued()] == [[1]]


async def test_pause_and_paused_in_a_fake_block_work_as_before(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    with app.testing.fake():
        assert await app.pause("default") is True
        assert "default" in await app.paused()
        assert await app.queues.resume("default") is True
    assert await app.paused() == {}  # the block's pause stayed in the block


async def test_a_limiter_made_before_the_block_follows_it_in_and_out(
    make_app: Callable[..., App],
) -> None:
    """Held on Redis outside, the same limiter in a block decides in the fake (its slot
    on Redis does not refuse it there), and on Redis again after."""
    app = make_app()
    api = app.limiter("outbound-api", concurrent=1)
    async with api:
        with app.testing.fake():
            async with api:  # the fake's slots: Redis' holder is not here
                with pytest.raises(OverLimit):
                    async with api:
                        pass
        with pytest.raises(OverLimit):  # Redis again: its holder is
            async with api:
                pass
    async with api:
        pass


async def test_a_fake_block_reaches_no_server_for_pause_or_limiter() -> None:
    """An App whose URL reaches nothing: the block's pause and limiter answer anyway;
    the admin reads still raise ``NotFaked``."""
    app = App(NO_REDIS, namespace="review-42-no-server")
    api = app.limiter("outbound-api", concurrent=1)
    try:
        with app.testing.fake():
            assert await app.queues.pause("mail") is True
            assert list(await app.queues.paused(["mail", "default"])) == ["mail"]
            async with api:
                pass
            with pytest.raises(NotFaked, match="admin"):
                app._store()
    finally:
        await app.close()


async def test_inline_holds_a_paused_queues_jobs_and_runs_them_at_resume(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    ran: list[int] = []

    @app.job(name="send")
    async def send(n: int) -> None:
        ran.append(n)

    with app.testing.inline() as testing:
        await app.pause("default")
        await send.enqueue(1)
        await send.enqueue(2)
        assert ran == []
        assert [job.state for job in testing.enqueued()] == ["queued", "queued"]
        pauses = await app.paused()
        assert isinstance(pauses["default"], Pause)
        assert await app.resume("default") is True
        assert ran == [1, 2]
        assert testing.enqueued() == []


async def test_a_drain_leaves_a_paused_queues_jobs_queued(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.job(name="send")
    async def send(n: int) -> None: ...

    with app.testing.fake() as testing:
        jid = await send.enqueue(1)
        assert jid is not None
        await app.queues.pause("default")
        assert await testing.drain() == []
        assert testing.status(jid).state == "queued"
        await app.queues.resume("default")
        assert [run.outcome for run in await testing.drain()] == ["succeeded"]


async def test_the_same_calls_outside_the_block_reach_redis(
    make_app: Callable[..., App],
) -> None:
    """The other side: nothing is broken outside a block (the finding is the block)."""
    app = make_app()
    async with app.limiter("outbound-api", concurrent=1):
        assert await app.pause("default") is True
    assert "default" in await app.paused()
    assert await app.queues.resume("default") is True


async def test_a_block_left_by_an_exception_or_refused_nested_unfakes_the_app(
    make_app: Callable[..., App],
) -> None:
    """A block's exit restores Redis whatever ends it; a nested block is refused and
    leaves the outer one in effect until the outer exits."""
    app = make_app()
    with pytest.raises(ValueError, match="boom"), app.testing.fake():
        raise ValueError("boom")
    assert not app.testing.active
    with app.testing.fake():
        with pytest.raises(RuntimeError, match="already faked"), app.testing.inline():
            pass
        assert app.testing.active
    assert not app.testing.active
    assert await app.pause("default") is True  # Redis again
