"""A batch callback's fair group: ``group=fn`` (on the decorator or on a call) names the
group from the callback's arguments when the signature is stored, so the callback the
relay enqueues when the batch ends waits in that group, as the same job enqueued
directly does (before, a function's group was dropped: the callback ran in no group)."""

from __future__ import annotations

from cogworker_async import App, Group
from cogworker_async.jobs.signature import callback_payload


def _app() -> App:
    return App(redis_url="redis://127.0.0.1:1/0")  # never reached: nothing is enqueued


def test_a_decorators_group_function_names_the_callbacks_group() -> None:
    app = _app()

    @app.job(group=lambda tenant: f"tenant-{tenant}")
    async def report(tenant: str) -> None: ...

    stored = report.s("acme").stored()
    assert stored["group"] == "tenant-acme"
    payload = callback_payload(report.definition, stored, "b1", "success", now=1.0)
    assert payload["group"] == "tenant-acme"


def test_a_calls_group_function_names_the_callbacks_group() -> None:
    app = _app()

    @app.job
    async def report(tenant: str) -> None: ...

    stored = report.options(group=Group(lambda tenant: f"t-{tenant}")).s("zed").stored()
    assert stored["group"] == "t-zed"


def test_a_fixed_group_and_no_group_are_kept_as_given() -> None:
    app = _app()

    @app.job
    async def report(tenant: str) -> None: ...

    assert report.options(group="fixed").s("x").stored()["group"] == "fixed"
    assert "group" not in report.s("x").stored()
