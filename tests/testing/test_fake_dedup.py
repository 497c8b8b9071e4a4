"""The dedup modes in the testing fake keep the rules Redis keeps (tests/jobs/
test_dedup.py proves them on a real server): a throttle's second enqueue returns None, a
debounced burst is one scheduled job with the last arguments, a coalesced job merges
while it waits and keeps one follow-up while it runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cogworker_async import App


def app_with_note(make_app: Callable[..., App]) -> tuple[App, Any, list[Any]]:
    app = make_app(track_jobs=True)
    ran: list[Any] = []

    @app.job(name="note")
    async def note(key: str, value: Any) -> None:
        ran.append(value)

    return app, note, ran


async def test_a_throttled_key_runs_once_in_its_window(make_app: Callable[..., App]) -> None:
    app, note, ran = app_with_note(make_app)
    async with app.testing.fake():
        first = await note.options(throttle=60, key="k").enqueue("k", 1)
        second = await note.options(throttle=60, key="k").enqueue("k", 2)
        other = await note.options(throttle=60, key="other").enqueue("other", 3)
        await app.testing.drain()

    assert first is not None
    assert second is None
    assert other is not None
    assert sorted(ran) == [1, 3]


async def test_a_debounced_burst_is_one_scheduled_job_with_the_last_arguments(
    make_app: Callable[..., App],
) -> None:
    app, note, ran = app_with_note(make_app)
    async with app.testing.fake():
        jids = {await note.options(debounce=30, key="d").enqueue("d", n) for n in range(4)}
        [waiting] = app.testing.enqueued()
        assert (waiting.state, waiting.args) == ("scheduled", ["d", 3])
        await app.testing.drain(include_scheduled=True)

    assert len(jids) == 1
    assert ran == [3]


async def test_a_coalesced_job_merges_while_it_waits_and_keeps_one_follow_up_while_it_runs(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True)
    ran: list[int] = []
    follow_ups: list[str | None] = []

    @app.job(name="rebuild")
    async def rebuild(n: int) -> None:
        ran.append(n)
        if n == 2:  # while it runs: two more enqueues keep one follow-up (the last)
            follow_ups.append(await rebuild.options(coalesce=True, key="r").enqueue(3))
            follow_ups.append(await rebuild.options(coalesce=True, key="r").enqueue(4))

    async with app.testing.fake():
        merged = {await rebuild.options(coalesce=True, key="r").enqueue(n) for n in range(3)}
        await app.testing.drain()

    assert len(merged) == 1
    assert len(set(follow_ups)) == 1
    assert ran == [2, 4]
