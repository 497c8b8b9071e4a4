"""A batch's callback keeps its ``options(timeout=S)`` (issue 40, defect 18 for
callbacks): the relay enqueues it when the batch ends from what the batch stored
(``Signature.stored``), so the timeout must be stored with it — else a callback that
should stop at S runs on as long as it likes. A chain's steps keep theirs too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from cogworker_async import App
from cogworker_async.jobs.signature import callback_payload
from tests.waiting import wait_until

WAIT = 15.0


def shop(make_app: Callable[..., App]) -> tuple[App, dict[str, Any]]:
    app = make_app(track_jobs=True)

    @app.job(name="quick", retry=0, keep_result=600)
    async def quick(n: int) -> int:
        return n

    @app.job(name="slow", retry=0, keep_result=600)
    async def slow(*values: Any) -> str:
        await anyio.sleep(3)
        return "done"

    return app, {"quick": quick, "slow": slow}


async def _ended(app: App, jid: str) -> bool:
    return (await app.status(jid)).state in ("succeeded", "dead", "cancelled")


async def test_a_callbacks_timeout_stops_its_run(make_app: Callable[..., App]) -> None:
    app, jobs = shop(make_app)
    async with app.worker():
        async with app.batch(on_complete=jobs["slow"].options(timeout=0.5).s("x")) as batch:
            await jobs["quick"].enqueue(1)
        callback = f"{batch.bid}-complete"
        await wait_until(lambda: _ended(app, callback), timeout=WAIT)
    status = await app.status(callback)
    assert status.state == "dead"
    assert status.error is not None
    assert "JobTimeout" in status.error
    assert "0.5s" in status.error


async def test_a_chain_steps_timeout_stops_its_run(make_app: Callable[..., App]) -> None:
    app, jobs = shop(make_app)
    async with app.worker():
        jids = await app.chain(jobs["quick"].s(1),
                               jobs["slow"].options(timeout=0.5).s()).enqueue()
        await wait_until(lambda: _ended(app, jids[-1]), timeout=WAIT)
    status = await app.status(jids[-1])
    assert status.state == "dead"
    assert "JobTimeout" in str(status.error)


def test_a_stored_timeout_that_is_no_number_of_seconds_is_ignored(
    make_app: Callable[..., App],
) -> None:
    """A batch hash is data a co-tenant could have written: the decorator's timeout then."""
    _, jobs = shop(make_app)
    definition = jobs["slow"].definition
    stored = jobs["slow"].options(timeout=2.5).s("x").stored()
    assert callback_payload(definition, stored, "b", "complete", 1.0)["timeout"] == 2.5
    for bad in ("1", -1, float("inf"), True, None):
        payload = callback_payload(definition, {**stored, "timeout": bad}, "b", "complete", 1.0)
        assert "timeout" not in payload  # slow declares none
