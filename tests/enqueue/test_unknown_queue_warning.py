"""An enqueue on a queue that is not one of the App's is warned about, once per queue:
``options(queue="defualt")`` returns a jid and the job would wait forever, silently (issue
45, item 2). The App's queues (declared, the default, each job's) are never warned about."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from cogworker_async import App

LOGGER = "cogworker_async.enqueue.unknown_queue"


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == LOGGER and record.levelno == logging.WARNING]


async def test_a_typo_queue_is_warned_about_once(make_app: Callable[..., App],
                                                caplog: pytest.LogCaptureFixture) -> None:
    jobs = make_app(queues=["default", "critical"])

    @jobs.job(name="ping")
    async def ping() -> None: ...

    caplog.set_level(logging.WARNING, logger=LOGGER)
    for _ in range(3):
        assert await ping.options(queue="defualt").enqueue() is not None
    [warning] = warnings_of(caplog)
    assert "'defualt'" in warning
    assert "critical, default" in warning  # the App's queues
    assert "a typo?" in warning


async def test_the_apps_own_queues_are_not_warned_about(make_app: Callable[..., App],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    jobs = make_app(queues=["default", "critical"])

    @jobs.job(name="ping")
    async def ping() -> None: ...

    caplog.set_level(logging.WARNING, logger=LOGGER)
    await ping.enqueue()  # the default queue
    await ping.options(queue="critical").enqueue()  # declared
    await jobs.enqueue("ping")

    @jobs.job(name="slow", queue="slow")  # registered after the first enqueue
    async def slow() -> None: ...

    await slow.enqueue()
    await ping.options(queue="slow").enqueue()  # a queue a job's decorator names
    await ping.enqueue_many([((), {}), ((), {})])
    assert warnings_of(caplog) == []


async def test_each_app_warns_once_for_each_queue(make_app: Callable[..., App],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    first, second = make_app(), make_app()
    pings = [app.job(name="ping")(_noop) for app in (first, second)]
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for ping in pings:
        await ping.options(queue="lwo").enqueue()
        await ping.options(queue="hgih").enqueue()
        await ping.options(queue="lwo").enqueue()
    assert len(warnings_of(caplog)) == 4


async def _noop() -> None: ...
