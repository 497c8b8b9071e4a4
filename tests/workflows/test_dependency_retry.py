"""A job that takes its parent's result, filed dead without it, then retried from dead by
hand (issue 40, defect 15's last case): its dead entry holds null where the result goes,
so a retry must never run it with None — it is filed dead again, saying which job, which
parent and why. A parent whose result is null (it returned None) still passes it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from cogworker_async import App
from cogworker_async.admin import Inspector
from tests.waiting import wait_until

WAIT = 15.0


def shop(make_app: Callable[..., App]) -> tuple[App, dict[str, Any], list[Any]]:
    """Jobs whose child records every value it was called with."""
    app = make_app(track_jobs=True, queues=["default", "later"])
    calls: list[Any] = []

    @app.job(name="forgetful", retry=0)
    async def forgetful() -> int:
        return 41

    @app.job(name="broken", retry=0)
    async def broken() -> int:
        raise ValueError("no")

    @app.job(name="nothing", retry=0, keep_result=600)
    async def nothing() -> None:
        return None

    @app.job(name="step", retry=0, keep_result=600)
    async def step() -> int:
        return 7

    @app.job(name="collect", retry=0)
    async def collect(value: Any) -> None:
        calls.append(value)

    return app, {"forgetful": forgetful, "broken": broken, "nothing": nothing,
                 "step": step, "collect": collect}, calls


async def _state_is(app: App, jid: str, state: str) -> bool:
    return (await app.status(jid)).state == state


async def _retry_dead(app: App, jid: str) -> None:
    insp = Inspector(app)
    [record] = [r for r in (await insp.dead.page()).items if r.jid == jid]
    assert (await insp.dead.retry([record.token])).done == 1


async def _dead_entry(app: App, jid: str) -> dict[str, Any]:
    store = app._store()
    raws = await store.client.zrange(store.keys.dead("default"), 0, -1)
    entries: list[dict[str, Any]] = [json.loads(cast(bytes, raw)) for raw in raws]
    [entry] = [e for e in entries if e["jid"] == jid]
    return entry


async def test_a_child_filed_dead_for_a_missing_result_is_not_run_with_none_on_retry(
    make_app: Callable[..., App],
) -> None:
    app, jobs, calls = shop(make_app)
    parent = await jobs["forgetful"].options(queue="later").enqueue()
    child = await jobs["collect"].options(after=[parent], pass_result=True).enqueue()
    async with app.worker(queues=["later", "default"]):
        await wait_until(lambda: _state_is(app, child, "dead"), timeout=WAIT)
        assert "ParentResultMissing" in str((await app.status(child)).error)
        await _retry_dead(app, child)
        await wait_until(lambda: _dead_again(app, child), timeout=WAIT)
    assert calls == []  # never run, with None or anything
    status = await app.status(child)
    assert status.state == "dead"
    assert status.error is not None
    assert status.error.startswith("ParentResultMissing")
    assert child in status.error
    assert parent in status.error
    assert "retried" in status.error
    entry = await _dead_entry(app, child)
    assert entry["args"] == [None]  # still readable
    assert entry["error_class"] == "ParentResultMissing"


async def test_a_child_filed_dead_by_its_failed_parent_is_not_run_with_none_on_retry(
    make_app: Callable[..., App],
) -> None:
    app, jobs, calls = shop(make_app)
    async with app.worker():
        parent = await jobs["broken"].enqueue()
        child = await jobs["collect"].options(after=[parent], pass_result=True,
                                              on_parent_failure="dead").enqueue()
        await wait_until(lambda: _state_is(app, child, "dead"), timeout=WAIT)
        assert "ParentFailed" in str((await app.status(child)).error)
        await _retry_dead(app, child)
        await wait_until(lambda: _dead_again(app, child), timeout=WAIT)
    assert calls == []
    status = await app.status(child)
    assert status.error is not None
    assert child in status.error
    assert parent in status.error
    assert "ParentFailed" in status.error  # the cause it was first filed for


async def test_a_parent_returning_none_still_passes_it_and_other_dead_jobs_retry(
    make_app: Callable[..., App],
) -> None:
    """null as a result is a result: only a job filed without its result is refused; a
    job filed dead by a failed parent it takes nothing from runs when retried."""
    app, jobs, calls = shop(make_app)
    async with app.worker():
        parent = await jobs["nothing"].enqueue()
        child = await jobs["collect"].options(after=[parent], pass_result=True).enqueue()
        await wait_until(lambda: _state_is(app, child, "succeeded"), timeout=WAIT)
        assert calls == [None]
        bad = await jobs["broken"].enqueue()
        plain = await jobs["collect"].options(after=[bad], on_parent_failure="dead"
                                              ).enqueue("mine")
        await wait_until(lambda: _state_is(app, plain, "dead"), timeout=WAIT)
        await _retry_dead(app, plain)
        await wait_until(lambda: _state_is(app, plain, "succeeded"), timeout=WAIT)
    assert calls == [None, "mine"]


async def _dead_again(app: App, jid: str) -> bool:
    """The retried run ended: filed dead again (its error says it was retried), or run
    (succeeded: what must not happen, seen at once rather than at the timeout)."""
    status = await app.status(jid)
    return status.state == "succeeded" or (status.state == "dead" and
                                           "retried" in str(status.error))
