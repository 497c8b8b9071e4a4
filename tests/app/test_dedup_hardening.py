"""Dedup modes at their edges (issue 40): ``enqueue_many`` keeps each mode's rule; a merge
keeps the job's jid whatever a client middleware did to the payload's field order; a
debounced job's ``expires_in`` counts from when it may first start; a coalesced job
waiting again after a retry (or retried from dead) still takes the merges."""

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
