"""Dedup modes end to end, on a real Redis (single and a 3-master cluster): throttle,
debounce and coalesce keep their rule exactly — counted runs and the arguments they ran
with — one enqueue at a time and under 20 concurrent enqueuers (each its own App, its own
connections); what does not combine is refused at the call."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import App, ConfigurationError
from tests.conftest import url_of_topology
from tests.waiting import wait_until

WAIT = 20.0
ENQUEUERS = 20

redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)


def recording(app: App, ran: list[tuple[str, Any]], gate: anyio.Event | None = None) -> Any:
    @app.job(name="note", retry=0)
    async def note(key: str, value: Any) -> None:
        ran.append((key, value))
        if gate is not None:
            await gate.wait()

    return note


async def test_throttle_runs_the_first_enqueue_of_a_window_and_refuses_the_rest(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True)
    ran: list[tuple[str, Any]] = []
    note = recording(app, ran)
    throttled = note.options(throttle=1.0, key="report:7")

    began = time.monotonic()  # before: the window opens inside the enqueue's script
    first = await throttled.enqueue("report:7", 1)
    assert first is not None
    async with app.worker():
        await wait_until(lambda: len(ran) == 1, timeout=WAIT)
        # the first has finished: the window still holds
        assert await throttled.enqueue("report:7", 2) is None
        assert await note.options(throttle=1.0, key="report:8").enqueue("report:8", 1)
        await wait_until(lambda: throttled.enqueue("report:7", 3), timeout=WAIT, every=0.05)
        elapsed = time.monotonic() - began
        await wait_until(lambda: len(ran) == 3, timeout=WAIT)

    assert elapsed >= 1.0
    assert sorted(ran) == [("report:7", 1), ("report:7", 3), ("report:8", 1)]


async def test_debounce_runs_a_burst_once_after_its_last_enqueue_with_its_last_arguments(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True)
    ran: list[tuple[str, Any]] = []
    note = recording(app, ran)
    debounced = note.options(debounce=0.4, key="user:1")

    async with app.worker():
        jids = []
        for value in range(5):
            if value:
                await anyio.sleep(0.1)
            jids.append(await debounced.enqueue("user:1", value))
        last = time.monotonic()
        await wait_until(lambda: len(ran) == 1, timeout=WAIT)
        ran_after = time.monotonic() - last
        await anyio.sleep(0.3)  # nothing more comes: the burst was one job

    assert len(set(jids)) == 1
    assert ran == [("user:1", 4)]
    assert ran_after >= 0.4 - 0.05  # Redis' clock against this one: a little slack
    assert (await app.status(jids[0])).state == "succeeded"


async def test_coalesce_merges_into_the_waiting_job_and_keeps_one_follow_up_of_the_running(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True, concurrency=2)
    ran: list[tuple[str, Any]] = []
    gate = anyio.Event()
    note = recording(app, ran, gate)
    coalesced = note.options(coalesce=True, key="index")

    waiting = {await coalesced.enqueue("index", value) for value in range(3)}
    assert len(waiting) == 1  # merged into the one waiting
    async with app.worker():
        await wait_until(lambda: len(ran) == 1, timeout=WAIT)  # running, held by the gate
        follow_ups = {await coalesced.enqueue("index", value) for value in range(3, 6)}
        assert len(follow_ups) == 1
        assert follow_ups != waiting
        assert (await app.status(follow_ups.pop())).state == "waiting"
        gate.set()
        await wait_until(lambda: len(ran) == 2, timeout=WAIT)
        await anyio.sleep(0.3)

    assert ran == [("index", 2), ("index", 5)]


async def test_twenty_concurrent_enqueuers_keep_each_rule_exactly(
    make_app: Callable[..., App], redis_url: str, namespace: str,
) -> None:
    """Each enqueuer its own App (its own pool): the scripts decide, never the client."""
    apps = [make_app(track_jobs=True) for _ in range(ENQUEUERS)]
    ran: list[tuple[str, Any]] = []
    gate = anyio.Event()
    worker_app = make_app(track_jobs=True, concurrency=4)
    recording(worker_app, ran, gate)
    notes = [recording(app, []) for app in apps]
    results: dict[str, list[str | None]] = {"throttle": [], "debounce": [], "coalesce": []}

    async def burst(note: Any, index: int) -> None:
        results["throttle"].append(
            await note.options(throttle=30.0, key="t").enqueue("t", index))
        results["debounce"].append(
            await note.options(debounce=0.5, key="d").enqueue("d", index))
        results["coalesce"].append(
            await note.options(coalesce=True, key="c").enqueue("c", index))

    async with anyio.create_task_group() as tg:
        for index, note in enumerate(notes):
            tg.start_soon(burst, note, index)
    async with worker_app.worker():
        await wait_until(lambda: len(ran) == 3, timeout=WAIT)
        # the coalesced job runs (held): twenty more keep exactly one follow-up
        results["coalesce"] = []
        async with anyio.create_task_group() as tg:
            for index, note in enumerate(notes):
                tg.start_soon(_coalesce_again, note, index, results)
        gate.set()
        await wait_until(lambda: len(ran) == 4, timeout=WAIT)
        await anyio.sleep(0.5)

    assert [r for r in results["throttle"] if r is not None].__len__() == 1
    assert len(set(results["debounce"])) == 1
    assert len(set(results["coalesce"])) == 1
    keys = sorted(key for key, _ in ran)
    assert keys == ["c", "c", "d", "t"], ran
    # the first coalesced run took one of the first burst's arguments, the follow-up one
    # of the second's (whichever reached Redis last)
    first, follow_up = [value for key, value in ran if key == "c"]
    assert first in range(ENQUEUERS)
    assert follow_up in range(100, 100 + ENQUEUERS)
    assert ran[-1] == ("c", follow_up)


async def _coalesce_again(note: Any, index: int, results: dict[str, list[str | None]]) -> None:
    results["coalesce"].append(await note.options(coalesce=True, key="c").enqueue("c", 100 + index))


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"throttle": 1, "debounce": 1}, ValueError, "one dedup mode"),
    ({"key": "k"}, ValueError, "key names what"),
    ({"throttle": 0}, ValueError, "throttle must be"),
    ({"debounce": "5"}, TypeError, "debounce must be"),
    ({"coalesce": 1}, TypeError, "coalesce must be"),
    ({"coalesce": True, "key": ""}, TypeError, "key must be"),
    ({"coalesce": True, "jid": "chosen-1"}, ValueError, "does not combine"),
    ({"throttle": 5, "after": ["a" * 24]}, ValueError, "does not combine")])
def test_what_does_not_combine_is_refused_at_the_call(
    make_app: Callable[..., App], options: dict[str, Any], error: type[Exception], match: str,
) -> None:
    app = make_app()
    note = recording(app, [])
    with pytest.raises(error, match=match):
        note.options(**options)


async def test_a_dedup_mode_that_decides_the_time_or_the_batch_is_refused_at_the_enqueue(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True)
    note = recording(app, [])
    with pytest.raises(ValueError, match="decides when the job runs"):
        await note.options(debounce=1).enqueue_in(5, "k", 1)
    async with app.batch():
        with pytest.raises(ValueError, match="cannot join a batch"):
            await note.options(coalesce=True).enqueue("k", 1)
        await note.enqueue("k", 0)  # the batch has a member
    untracked = make_app(track_jobs=False)
    with pytest.raises(ConfigurationError, match="coalesce needs status records"):
        await recording(untracked, []).options(coalesce=True).enqueue("k", 1)
    # throttle may be scheduled
    assert await note.options(throttle=5).enqueue_in(60, "k", 1) is not None
