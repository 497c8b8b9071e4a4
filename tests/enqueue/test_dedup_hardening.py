"""Dedup modes at their edges (issue 40): ``enqueue_many`` keeps each mode's rule; a merge
keeps the job's jid whatever a client middleware did to the payload's field order; a
debounced job's ``expires_in`` counts from when it may first start; a coalesced job
waiting again after a retry (or retried from dead) still takes the merges. And the
merge kept in the key's state (bd250f3), as a hostile review found it: a merge followed
by an enqueue of another group, a follow-up released after a clear, a worker with
``fetch="basic"`` (which pops without a script)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cogworker_async import App, ConfigurationError, current_job
from cogworker_async.middleware import Enqueue, EnqueueNext
from tests.conftest import url_of_topology
from tests.waiting import wait_until

WAIT = 20.0

redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)


def recording(app: App, ran: list[tuple[str, Any, str]], gate: anyio.Event | None = None,
              retry: int = 0) -> Any:
    """Job ``note``: each run appends (key, value, the jid it ran under)."""

    @app.job(name="note", retry=retry)
    async def note(key: str, value: Any) -> None:
        ran.append((key, value, current_job().jid))
        if gate is not None:
            await gate.wait()

    return note


async def test_enqueue_many_keeps_each_dedup_modes_rule(make_app: Callable[..., App]) -> None:
    app = make_app(track_jobs=True)
    ran: list[tuple[str, Any, str]] = []
    note = recording(app, ran)

    throttled = await note.options(throttle=30.0, key="t").enqueue_many(
        [(("t", value), {}) for value in range(5)])
    debounced = await note.options(debounce=0.2, key="d").enqueue_many(
        [(("d", value), {}) for value in range(5)])
    coalesced = await note.options(coalesce=True, key="c").enqueue_many(
        [(("c", value), {}) for value in range(5)])

    assert throttled[0] is not None
    assert throttled[1:] == [None] * 4
    assert len(set(debounced)) == 1
    assert len(set(coalesced)) == 1
    async with app.worker():
        await wait_until(lambda: len(ran) == 3, timeout=WAIT)
        await anyio.sleep(0.5)  # nothing more comes
    assert sorted((key, value) for key, value, _ in ran) == [("c", 4), ("d", 4), ("t", 0)]


async def front_field(enqueue: Enqueue, call_next: EnqueueNext) -> str | None:
    """A client middleware that writes fields before the jid, one of them a nested
    ``jid`` (a trace context naming the job)."""
    payload = enqueue.payload
    fields = list(payload.items())
    payload.clear()
    payload["trace"] = {"jid": fields[0][1], "tenant": "t-1"}
    payload.update(fields)
    return await call_next(enqueue)


@pytest.mark.parametrize("mode", ["debounce", "coalesce"])
async def test_a_merge_keeps_the_jid_when_a_middleware_writes_fields_before_it(
    make_app: Callable[..., App], mode: str,
) -> None:
    app = make_app(track_jobs=True)
    app.add_client_middleware(front_field)
    ran: list[tuple[str, Any, str]] = []
    note = recording(app, ran)
    options = {"debounce": 0.2} if mode == "debounce" else {"coalesce": True}
    merged = note.options(key="m", **options)

    jids = [await merged.enqueue("m", value) for value in range(3)]

    assert len(set(jids)) == 1
    async with app.worker():
        await wait_until(lambda: len(ran) == 1, timeout=WAIT)
        await wait_until(lambda: _state(app, jids[0], "succeeded"), timeout=WAIT)
    assert ran == [("m", 2, jids[0])]


async def _state(app: App, jid: str | None, state: str) -> bool:
    assert jid is not None
    return (await app.status(jid)).state == state


async def test_a_debounced_jobs_expiry_counts_from_when_it_may_first_start(
    make_app: Callable[..., App],
) -> None:
    app = make_app(track_jobs=True)
    ran: list[tuple[str, Any, str]] = []
    note = recording(app, ran)
    debounced = note.options(debounce=0.6, expires_in=0.3, key="e")

    jid = await debounced.enqueue("e", 1)

    async with app.worker():
        await wait_until(lambda: _state(app, jid, "succeeded"), timeout=WAIT)
    assert ran == [("e", 1, jid)]


async def test_coalesce_under_basic_fetch_is_refused_at_the_call(
    make_app: Callable[..., App],
) -> None:
    """Basic fetch (BRPOP) keeps no records, which a merge waiting for the job's fetch
    needs (its record names the key)."""
    app = make_app(track_jobs=True, fetch="basic")
    note = recording(app, [])
    with pytest.raises(ConfigurationError, match="coalesce needs status records"):
        await note.options(coalesce=True).enqueue("k", 1)


# -- the merge kept in the key's state (bd250f3), as a hostile review found it -----------

async def test_a_merge_waiting_for_its_fetch_is_not_lost_when_a_later_enqueue_follows(
    make_app: Callable[..., App],
) -> None:
    """L is queued in group a; a second enqueue (group a) merges into it (returns L's
    jid: the caller is told its arguments run as L); a third names group b, so it
    follows L. L must run with the merged arguments (1), not its first ones (0)."""
    app = make_app(track_jobs=True)
    ran: list[tuple[str, Any, str]] = []
    note = recording(app, ran)
    first = await note.options(coalesce=True, key="g", group="a").enqueue("g", 0)
    merged = await note.options(coalesce=True, key="g", group="a").enqueue("g", 1)
    assert merged == first
    follow = await note.options(coalesce=True, key="g", group="b").enqueue("g", 2)
    assert follow not in (None, first)
    async with app.worker():
        await wait_until(lambda: len(ran) == 2, timeout=WAIT)
    assert ran == [("g", 1, first), ("g", 2, follow)]


async def test_a_follow_up_released_after_a_clear_still_takes_the_merges(
    make_app: Callable[..., App],
) -> None:
    """L runs; an enqueue makes its follow-up F (waiting, untouched by a clear of the
    queue's list); the list is cleared (nothing on it); L ends and F is released onto
    the (paused) queue. The next enqueue must merge into F — one run of the key with
    the last arguments — not push a second job because of the clear (F was put on its
    list after it)."""
    from cogworker_async.admin import Inspector

    app = make_app(track_jobs=True)
    ran: list[tuple[str, Any, str]] = []
    gate = anyio.Event()
    note = recording(app, ran, gate)
    coalesced = note.options(coalesce=True, key="f")
    insp = Inspector(app)
    first = await coalesced.enqueue("f", 0)
    async with app.worker():
        await wait_until(lambda: len(ran) == 1, timeout=WAIT)
        follow = await coalesced.enqueue("f", 1)
        assert follow != first
        await insp.queues.pause("default")
        assert await insp.queue("default").clear() == 0
        gate.set()
        await wait_until(lambda: _queued(app, follow), timeout=WAIT)
        last = await coalesced.enqueue("f", 2)
        await insp.queues.resume("default")
        await wait_until(lambda: len(ran) >= 2, timeout=WAIT)
        await anyio.sleep(1.0)  # a second run would come within this
    assert ran[1:] == [("f", 2, follow)]
    assert last == follow


async def _queued(app: App, jid: str | None) -> bool:
    assert jid is not None
    return (await app.status(jid)).state == "queued"


async def test_a_coalesced_enqueue_after_a_basic_worker_ran_the_last_one_runs(
    make_app: Callable[..., App],
) -> None:
    """The enqueuer's App fetches reliably (the default: coalesce allowed); a worker of
    the same namespace uses fetch="basic" (BRPOP: it writes no record). Once it ran the
    key's job, a new enqueue of the key must run — not 'merge' into the job that ran
    (its record still says queued) and be dropped."""
    enqueuer = make_app(track_jobs=True)
    worker = make_app(track_jobs=True, fetch="basic")
    ran: list[tuple[str, Any, str]] = []
    recording(worker, ran)
    note = recording(enqueuer, [])
    first = await note.options(coalesce=True, key="b").enqueue("b", 0)
    async with worker.worker():
        await wait_until(lambda: len(ran) == 1, timeout=WAIT)
        second = await note.options(coalesce=True, key="b").enqueue("b", 1)
        await wait_until(lambda: len(ran) == 2, timeout=WAIT)
    assert [value for _, value, _ in ran] == [0, 1]
    assert second != first


async def test_a_basic_worker_runs_the_arguments_merged_into_the_job_it_pops(
    make_app: Callable[..., App],
) -> None:
    enqueuer = make_app(track_jobs=True)
    worker = make_app(track_jobs=True, fetch="basic")
    ran: list[tuple[str, Any, str]] = []
    recording(worker, ran)
    note = recording(enqueuer, [])
    first = await note.options(coalesce=True, key="m").enqueue("m", 0)
    assert await note.options(coalesce=True, key="m").enqueue("m", 1) == first
    async with worker.worker():
        await wait_until(lambda: len(ran) == 1, timeout=WAIT)
        await anyio.sleep(0.5)  # nothing more comes
    assert ran == [("m", 1, first)]
