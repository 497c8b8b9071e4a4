"""A queue holding jobs that no live process serves is marked ``unserved`` (issue 45,
item 2): the decision alone (``admin/serving.py``), then the rows the admin model builds
for the dashboard and the CLI, on a real Redis with a real worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import anyio
import pytest

from cogworker_async import App
from cogworker_async.admin import Inspector, QueueInfo
from cogworker_async.admin.records import process_info
from cogworker_async.admin.serving import (
    mark_unserved,
    served_by_beats,
    served_by_live,
    unserved,
)
from tests.waiting import wait_until

SOON: Final = 0.2
"""Seconds until a scheduled job is due (then it is work a worker would take)."""
LATER: Final = 3600.0


# -- the decision -----------------------------------------------------------------------


def test_a_queue_with_jobs_and_no_live_process_for_it_is_unserved() -> None:
    assert unserved({"default", "slow"}, [["default"]]) == {"slow"}
    assert unserved({"slow"}, []) == {"slow"}  # no live process at all


def test_a_queue_a_live_process_serves_is_not_unserved() -> None:
    assert unserved({"default", "slow"}, [["default"], ["slow", "other"]]) == frozenset()


def test_an_empty_queue_is_never_unserved() -> None:
    # Only the queues holding jobs are asked about: an idle queue nobody serves is fine.
    assert unserved(set(), [["default"]]) == frozenset()


def test_a_live_process_that_does_not_say_its_queues_counts_as_serving_all() -> None:
    # A false alarm would send the user looking for a worker that is there.
    assert unserved({"slow"}, [["default"], None]) == frozenset()


def test_one_string_instead_of_names_is_refused() -> None:
    with pytest.raises(TypeError, match="not one string"):
        unserved("slow", [])
    with pytest.raises(TypeError, match="not one string"):
        unserved({"slow"}, ["slow"])


def test_the_beats_alone_say_what_the_full_process_rows_say() -> None:
    beats: list[dict[str, Any] | None] = [
        {"queues": ["a", "b"]}, {"queues": []}, {"queues": "a"}, {}, None]
    rows = [process_info({"identity": f"p{i}", "alive": True, "info": beat,
                          "last_beat": 1.0, "running": {}, "in_progress": 0}, 2.0)
            for i, beat in enumerate(beats)]
    assert served_by_beats(beats) == served_by_live(rows) == [["a", "b"], None, None, None,
                                                             None]


def test_marking_rows_counts_due_jobs_and_ignores_dead_processes() -> None:
    rows = [QueueInfo("a", 1, 0.0), QueueInfo("b", 0, 0.0, due=2), QueueInfo("c", 0, 0.0)]
    marked = mark_unserved(rows, [])
    assert [(r.name, r.unserved, r.state) for r in marked] == [
        ("a", True, "unserved"), ("b", True, "unserved"), ("c", False, "running")]
    paused = mark_unserved([QueueInfo("a", 1, 0.0, paused_since=1.0)], [])[0]
    assert (paused.unserved, paused.state) == (True, "paused")  # the pause is named first


# -- the admin model on a real Redis ----------------------------------------------------


def shop(make_app: Callable[..., App]) -> tuple[App, Any, anyio.Event]:
    app = make_app()
    release = anyio.Event()

    @app.job(name="hold")
    async def hold() -> None:
        await release.wait()

    return app, hold, release


async def rows(insp: Inspector) -> dict[str, QueueInfo]:
    names, _ = await insp.queues.bounded()
    return {info.name: info for info in await insp.queues.infos(names)}


async def test_a_job_on_a_queue_no_worker_serves_marks_it(
        make_app: Callable[..., App]) -> None:
    app, hold, _ = shop(make_app)
    insp = Inspector(app)
    assert not (await rows(insp))["default"].unserved  # empty, nobody serves it: fine

    await hold.enqueue()
    assert (await rows(insp))["default"].state == "unserved"
    summary = await insp.summary()
    assert [(q["name"], q["unserved"], q["state"]) for q in summary["queues"]] == [
        ("default", True, "unserved")]


async def test_a_due_scheduled_job_marks_its_queue_and_a_later_one_does_not(
        make_app: Callable[..., App]) -> None:
    app, hold, _ = shop(make_app)
    insp = Inspector(app)
    await hold.options(queue="later").enqueue_in(LATER)
    await hold.options(queue="soon").enqueue_in(SOON)
    await wait_until(lambda: _due(insp, "soon"))
    found = await rows(insp)
    assert found["soon"].unserved
    assert not found["later"].unserved  # nothing is late for it yet


async def _due(insp: Inspector, name: str) -> bool:
    return (await insp.queue(name).info()).due > 0


async def test_a_live_worker_serving_the_queue_clears_the_mark_and_one_on_others_does_not(
        make_app: Callable[..., App]) -> None:
    app, hold, release = shop(make_app)
    insp = Inspector(app)
    for _ in range(2):
        await hold.enqueue()
    await hold.options(queue="defualt").enqueue()  # the typo: nobody serves it
    async with app.worker(concurrency=1):
        # One hold runs, one waits on the queue: it holds a job, and is served.
        await wait_until(lambda: _serving(insp))
        found = await rows(insp)
        assert (found["default"].size, found["default"].unserved) == (1, False)
        assert found["defualt"].state == "unserved"
        # A queue's page (the live beats alone) and the summary (every process read
        # in full, passed on) say the same.
        assert not (await insp.queue("default").info()).unserved
        assert (await insp.queue("defualt").info()).unserved
        summary = {q["name"]: q["state"] for q in (await insp.summary())["queues"]}
        assert summary == {"default": "running", "defualt": "unserved"}
        release.set()
    # The worker has stopped: its marker is gone, the typo'd queue is still unserved.
    assert (await rows(insp))["defualt"].unserved


async def _serving(insp: Inspector) -> bool:
    alive = any(p.alive for p in await insp.processes.all())
    return alive and (await insp.queue("default").info()).size == 1
