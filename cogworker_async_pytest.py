"""pytest plugin: fixtures that fake an App's jobs for one test (``jobs.testing``).

Installed as a ``pytest11`` entry point, so the fixtures are there in every test of a
project that has cogworker-async installed::

    # conftest.py
    from myproject.tasks import jobs

    @pytest.fixture
    def fake_jobs(cogworker_fake):
        return cogworker_fake(jobs)          # jobs.testing, faked until the test ends

    # test_signup.py
    async def test_signup_sends_a_welcome_email(fake_jobs, client):
        await client.post("/signup", json={"email": "a@example.com"})
        (queued,) = fake_jobs.enqueued(job=send_welcome)
        assert queued.args == ["a@example.com"]
        runs = await fake_jobs.drain()
        assert [run.outcome for run in runs] == ["succeeded"]

This module imports only pytest and the standard library (cogworker_async is reached
through the App a test passes in), and it is a top-level module, not in the package:
pytest loads every ``pytest11`` plugin at every start, and loading one inside the
package would import ``cogworker_async`` first (about 0.3 s per start, measured). The
fixtures cost nothing to a test that does not ask for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from cogworker_async.app import App
    from cogworker_async.testing import Mode, Testing

FakeFactory = Callable[["App"], "Testing"]
"""``cogworker_fake(jobs)``: fakes ``jobs`` until the test ends, returns ``jobs.testing``."""


def _faking(mode: Callable[[App], Mode]) -> Iterator[FakeFactory]:
    with ExitStack() as stack:
        def enter(app: App) -> Testing:
            return stack.enter_context(mode(app))

        yield enter


@pytest.fixture
def cogworker_fake() -> Iterator[FakeFactory]:
    """``cogworker_fake(jobs)``: ``jobs``' enqueues are recorded in memory for the test
    (``jobs.testing.fake()``), to assert on (``enqueued()``) and to run (``drain()``);
    returns ``jobs.testing``. Several Apps may be faked in one test."""
    yield from _faking(lambda app: app.testing.fake())


@pytest.fixture
def cogworker_inline() -> Iterator[FakeFactory]:
    """``cogworker_inline(jobs)``: each enqueue of ``jobs`` runs its job at once, in the
    test, for the test (``jobs.testing.inline()``); returns ``jobs.testing``."""
    yield from _faking(lambda app: app.testing.inline())
