"""JSON logs from a live worker: every line logged while a job runs — an async job's, a
plain function's in its thread, a retry's — carries that run's jid, job, queue and
attempt; lines logged outside a job carry none (cogworker_async/logs.py).

A real worker in this process on the test server, with the JSON formatter and the job
context filter on a handler of the root logger, as an embedding application sets them up.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

import anyio
import pytest

from cogworker_async import App, Retry, current_job
from cogworker_async.logs import JOB_FIELDS, JobContextFilter, JsonFormatter
from tests.waiting import wait_until

log = logging.getLogger("shop.jobs")
"""The user's own logger, as a job module would have."""
MANAGER_LOGGER: Final = "cogworker_async.worker.manager"
OVERLAP_TIMEOUT: Final = 10.0
"""Seconds two concurrent runs wait for each other to have started."""


class JsonLines(logging.Handler):
    """Keeps each line as the formatter wrote it (from any task or thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.addFilter(JobContextFilter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def parsed(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]

    def saying(self, message: str) -> list[dict[str, Any]]:
        return [fields for fields in self.parsed() if fields["message"] == message]


@pytest.fixture
def captured() -> Iterator[JsonLines]:
    root = logging.getLogger()
    handler, level = JsonLines(), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def job_of(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: fields[key] for key in JOB_FIELDS if key in fields}


async def test_lines_logged_in_async_and_plain_jobs_carry_their_run(
    make_app: Callable[..., App], captured: JsonLines,
) -> None:
    jobs = make_app(queues=["default", "mail"], concurrency=4)
    threads: list[str] = []

    @jobs.job(name="send_receipt", queue="mail")
    async def send_receipt(order: int) -> None:
        log.info("sending receipt", extra={"order": order})

    @jobs.job(name="tally")
    def tally(a: int, b: int) -> None:  # a plain function: run in a thread
        threads.append(threading.current_thread().name)
        log.info("tallied %d", a + b)

    log.info("before the worker")
    receipt = await send_receipt.enqueue(7)
    total = await tally.enqueue(2, 3)
    async with jobs.worker():
        await wait_until(lambda: bool(captured.saying("sending receipt")
                                      and captured.saying("tallied 5")))
    log.info("after the worker")

    [sent] = captured.saying("sending receipt")
    assert job_of(sent) == {"jid": receipt, "job": "send_receipt", "queue": "mail",
                            "attempt": 1}
    assert sent["order"] == 7  # the job's own extra= field, beside the job's
    [tallied] = captured.saying("tallied 5")
    assert job_of(tallied) == {"jid": total, "job": "tally", "queue": "default",
                               "attempt": 1}
    assert threads  # the plain function ran in a thread of its own
    assert threads[0] != threading.main_thread().name
    outside = [*captured.saying("before the worker"), *captured.saying("after the worker"),
               *(f for f in captured.parsed() if f["logger"] == MANAGER_LOGGER)]
    assert len(outside) >= 3  # the worker said it started and stopped
    assert [job_of(fields) for fields in outside] == [{}] * len(outside)


async def test_a_retry_s_lines_say_attempt_2(
    make_app: Callable[..., App], captured: JsonLines,
) -> None:
    jobs = make_app()

    @jobs.job(name="charge")
    async def charge() -> None:
        log.info("charging")
        if current_job().attempt == 1:
            raise Retry(in_=0)

    jid = await charge.enqueue()
    async with jobs.worker():
        await wait_until(lambda: len(captured.saying("charging")) == 2)
    assert [job_of(fields) for fields in captured.saying("charging")] == [
        {"jid": jid, "job": "charge", "queue": "default", "attempt": attempt}
        for attempt in (1, 2)]


async def test_concurrent_runs_never_see_each_other_s_fields(
    make_app: Callable[..., App], captured: JsonLines,
) -> None:
    """Each run's context is its own task's: two runs logging between each other's lines
    each keep their own jid."""
    jobs = make_app(concurrency=2)
    started: list[int] = []
    both_started = anyio.Event()

    @jobs.job(name="pack")
    async def pack(box: int) -> None:
        log.info("packing %d", box)
        started.append(box)
        if len(started) == 2:
            both_started.set()
        with anyio.fail_after(OVERLAP_TIMEOUT):
            await both_started.wait()
        log.info("packed %d", box)

    jids = {box: await pack.enqueue(box) for box in (1, 2)}
    async with jobs.worker():
        await wait_until(lambda: len(captured.saying("packed 1") + captured.saying("packed 2"))
                         == 2)
    for box, jid in jids.items():
        [begun] = captured.saying(f"packing {box}")
        [ended] = captured.saying(f"packed {box}")
        assert begun["jid"] == ended["jid"] == jid


async def test_the_worker_s_done_and_failed_lines_carry_the_job(
    make_app: Callable[..., App], captured: JsonLines,
) -> None:
    jobs = make_app()

    @jobs.job(name="charge")
    async def charge() -> None:
        if current_job().attempt == 1:
            raise Retry(in_=0)

    jid = await charge.enqueue()
    async with jobs.worker():
        await wait_until(lambda: any(f["message"].startswith("done: charge")
                                     for f in captured.parsed()))
    [failed] = [f for f in captured.parsed() if f["message"].startswith("failed: charge")]
    [done] = [f for f in captured.parsed() if f["message"].startswith("done: charge")]
    assert job_of(failed) == {"jid": jid, "job": "charge", "queue": "default", "attempt": 1}
    assert job_of(done) == {"jid": jid, "job": "charge", "queue": "default", "attempt": 2}
