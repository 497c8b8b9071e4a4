"""Through a Redis outage every loop of a worker says once that it is failing and once
that it recovered (with how long it lasted), instead of a line per try — and the worker
works again afterwards.

A real worker in this process, against a private server that the test stops for a few
seconds and starts again on the same port (with its data: AOF, fsync always).
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from typing import Final

import anyio
import pytest
import redis
import redis.exceptions

from cogworker_async import App
from cogworker_async.jobs import wire
from cogworker_async.redis.keys import Keys
from cogworker_async.worker.streak import Streak
from tests.conftest import FAST
from tests.servers import ServerProcess
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

OUTAGE: Final = 3.0
"""Seconds Redis stays down: dozens of tries of every loop at the test's fast settings."""
RESUME_TIMEOUT: Final = 20.0
REFUSED_TIMEOUT: Final = 5.0
"""Seconds within which a refused fetch is logged (the worker fetches every 0.2 s)."""
SLOW_JOB: Final = 1.0
"""Seconds a job started just before the outage runs: it finishes while Redis is down,
so its settlement and its stats must wait for Redis too."""
# Loops that try Redis every fraction of a second at FAST settings: each must fail. (Not
# the orphan recovery pass: once its own beat has failed, a process may judge nobody
# until its beats have been steady again, and its pass does not call Redis meanwhile —
# it may or may not have failed before that; if it did, it must say it recovered.)
MUST_FAIL: Final = ("fetch", "heartbeat", "poller: moving due jobs", "wake-up channel",
                    "cron: ticking")
RECOVERED: Final = re.compile(r" recovered after (\d+\.\d)s \(\d+ failed tries\)$")
QUIET_BOUND: Final = 30
"""Most warning lines of the whole outage (one per loop, one per job caught in it)."""


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    started = ServerProcess(appendonly=True, extra=["--appendfsync", "always"]).start()
    yield started
    started.kill()
    started.cleanup()


async def test_an_outage_is_logged_once_per_loop_and_work_resumes(
    server: ServerProcess, namespace: str, caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = App(server.url, namespace=namespace, **FAST)
    done: list[str] = []
    slow_started = anyio.Event()

    @jobs.job()
    async def work(tag: str, seconds: float = 0.0) -> None:
        if seconds:
            slow_started.set()
        await anyio.sleep(seconds)
        done.append(tag)

    @jobs.periodic("* * * * * *")  # every second: the cron ticker talks to Redis
    async def tick() -> None:
        pass

    caplog.set_level(logging.INFO, logger="cogworker_async")
    try:
        async with jobs.worker():
            await work.enqueue("before")
            await wait_until(lambda: "before" in done, timeout=RESUME_TIMEOUT)
            await work.enqueue("across", SLOW_JOB)
            with anyio.fail_after(RESUME_TIMEOUT):
                await slow_started.wait()
            caplog.clear()
            server.stop()
            await anyio.sleep(OUTAGE)  # the fault's duration: the scenario itself
            server.start()
            await wait_until(lambda: "across" in done, timeout=RESUME_TIMEOUT)
            await _enqueue_when_back(work.enqueue, "after")
            await wait_until(lambda: "after" in done, timeout=RESUME_TIMEOUT)
            await wait_until(lambda: _all_recovered(caplog.records), timeout=RESUME_TIMEOUT)
    finally:
        await jobs.close()

    failed, recovered = _by_streak(caplog.records)
    assert set(MUST_FAIL) <= set(failed), sorted(failed)
    for loop, lines in failed.items():
        assert len(lines) == 1, (loop, lines)
        assert len(recovered[loop]) == 1, (loop, recovered[loop])
        assert 0 < _lasted(recovered[loop][0]) <= OUTAGE + RESUME_TIMEOUT, recovered[loop]
    # The heartbeat fails every try from the stop to the start: its streak is the outage.
    assert _lasted(recovered["heartbeat"][0]) >= OUTAGE / 2, recovered["heartbeat"]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) <= QUIET_BOUND, [r.getMessage() for r in warnings]


async def _enqueue_when_back(enqueue: Callable[[str], Awaitable[str | None]],
                             tag: str) -> None:
    """Enqueue once the test's own pool has reconnected (its first use after the
    restart may meet a dead connection; a duplicate would not change the outcome)."""

    async def enqueued() -> bool:
        try:
            await enqueue(tag)
        except redis.exceptions.ConnectionError:
            return False
        return True

    await wait_until(enqueued, timeout=RESUME_TIMEOUT, every=0.1)


def _by_streak(records: list[logging.LogRecord]) -> tuple[dict[str, list[str]],
                                                          dict[str, list[str]]]:
    """Per loop: its failure lines (warning and up) and its recovery lines."""
    failed: dict[str, list[str]] = defaultdict(list)
    recovered: dict[str, list[str]] = defaultdict(list)
    for record in records:
        loop = getattr(record, "streak", None)
        if loop is None:
            continue
        if record.levelno >= logging.WARNING:
            failed[loop].append(record.getMessage())
        elif RECOVERED.search(record.getMessage()):
            recovered[loop].append(record.getMessage())
    return failed, recovered


def _lasted(line: str) -> float:
    """The seconds a recovery line says the outage lasted."""
    found = RECOVERED.search(line)
    assert found is not None, line
    return float(found.group(1))


def _all_recovered(records: list[logging.LogRecord]) -> bool:
    failed, recovered = _by_streak(records)
    return bool(failed) and all(recovered[loop] for loop in failed)


async def test_redis_refusing_the_move_is_logged_as_what_redis_said(
    server: ServerProcess, namespace: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A fetch that Redis refuses (here OOM: maxmemory reached) is a failed fetch, in
    Redis' words, and the worker fetches again once Redis accepts — not a queue "of the
    wrong type", skipped for the rest of the process's life."""
    jobs = App(server.url, namespace=namespace, **FAST)
    done: list[str] = []

    @jobs.job()
    async def work(tag: str) -> None:
        done.append(tag)

    raw = redis.Redis(port=server.port)
    caplog.set_level(logging.INFO, logger="cogworker_async")
    try:
        async with jobs.worker():
            payload = wire.build(work.definition.name, ["refused-then-run"], {},
                                queue="default", retry=False, now=time.time())
            queued = wire.encode(payload, jobs.settings.max_payload_bytes)
            # The job and the memory limit in one step: the worker's next fetch is the
            # first command to meet the limit.
            with raw.pipeline(transaction=True) as pipe:
                pipe.lpush(Keys(namespace).queue("default"), queued)
                pipe.config_set("maxmemory", "1")
                pipe.execute()
            await wait_until(lambda: _fetch_failed_with(caplog.records, "maxmemory"),
                             timeout=REFUSED_TIMEOUT)
            raw.config_set("maxmemory", "0")
            await wait_until(lambda: "refused-then-run" in done, timeout=RESUME_TIMEOUT)
    finally:
        raw.config_set("maxmemory", "0")
        raw.close()
        await jobs.close()
    assert not [r for r in caplog.records if "not a list" in r.getMessage()]


def _fetch_failed_with(records: list[logging.LogRecord], words: str) -> bool:
    return any(getattr(r, "streak", None) == "fetch" and r.levelno >= logging.WARNING
               and words in r.getMessage() for r in records)


def test_a_streak_logs_its_start_and_its_end_and_only_debugs_between(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    streak = Streak("poller", clock=lambda: now[0])
    caplog.set_level(logging.DEBUG, logger="cogworker_async")
    streak.succeeded()  # healthy: nothing to say
    for _ in range(50):
        streak.failed(ConnectionError("refused"))
        now[0] += 0.1
    streak.succeeded()
    streak.succeeded()
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert said == [
        ("WARNING", "poller failed (ConnectionError: refused); retrying (said again only "
                    "once it recovers)"),
        ("INFO", "poller recovered after 5.0s (50 failed tries)"),
    ]
    assert not streak.failing
