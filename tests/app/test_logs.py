"""Logs: the JSON line's fields, the job fields on lines logged in a job (and only
there), the text format unchanged outside a job, and ``configure`` (cogworker_async/logs.py).

Records go through a logger of the test's own (not in logging's tree: nothing reaches
the root logger), with the filter on its handler as a user would attach it.
"""

from __future__ import annotations

import io
import json
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pytest

from cogworker_async.jobs.context import CURRENT, JobContext
from cogworker_async.logs import (
    TEXT_FORMAT,
    JobContextFilter,
    JsonFormatter,
    TextFormatter,
    configure,
    job_fields,
)

CLOCK_SLACK: Final = timedelta(seconds=5)
"""How far a line's timestamp may be from the test's own clock reading."""


class Lines(logging.Handler):
    """Keeps each formatted line (a handler as a user would set one up)."""

    def __init__(self, formatter: logging.Formatter) -> None:
        super().__init__()
        self.setFormatter(formatter)
        self.addFilter(JobContextFilter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def logger_to(formatter: logging.Formatter) -> tuple[logging.Logger, list[str]]:
    logger = logging.Logger("shop.orders", logging.DEBUG)
    handler = Lines(formatter)
    logger.addHandler(handler)
    return logger, handler.lines


def a_job(attempt: int = 1) -> JobContext:
    async def no_orphanings() -> int:
        return 0

    return JobContext(jid="0123abcd", name="send_receipt", queue="mail", attempt=attempt,
                      enqueued_at=None, created_at=None, payload={},
                      _orphanings=no_orphanings)


@contextmanager
def running(job: JobContext) -> Iterator[None]:
    """As the worker does around a run (worker/execute.py)."""
    token = CURRENT.set(job)
    try:
        yield
    finally:
        CURRENT.reset(token)


def test_a_json_line_has_the_utc_time_level_logger_and_message() -> None:
    log, lines = logger_to(JsonFormatter())
    before = datetime.now(UTC)
    log.warning("order %s is %d days late", "A-7", 3)
    [line] = lines
    fields = json.loads(line)
    assert fields.keys() == {"timestamp", "level", "logger", "message"}
    assert fields["level"] == "WARNING"
    assert fields["logger"] == "shop.orders"
    assert fields["message"] == "order A-7 is 3 days late"
    stamp = datetime.fromisoformat(fields["timestamp"])
    assert stamp.utcoffset() == timedelta(0)
    assert abs(stamp - before) < CLOCK_SLACK


def test_a_line_logged_in_a_job_carries_its_jid_name_queue_and_attempt() -> None:
    log, lines = logger_to(JsonFormatter())
    with running(a_job(attempt=2)):
        log.info("sending")
    [fields] = map(json.loads, lines)
    assert fields["message"] == "sending"
    assert {key: fields[key] for key in ("jid", "job", "queue", "attempt")} == {
        "jid": "0123abcd", "job": "send_receipt", "queue": "mail", "attempt": 2}
    # The short fields lead the line; the job's right after the fixed ones.
    assert list(fields)[:8] == ["timestamp", "level", "logger", "message",
                                "jid", "job", "queue", "attempt"]


def test_outside_a_job_no_line_carries_job_fields_and_text_is_the_old_format() -> None:
    log, json_lines = logger_to(JsonFormatter())
    text_log, text_lines = logger_to(TextFormatter())
    old = logging.Formatter(TEXT_FORMAT)
    with running(a_job()):
        pass  # a job that ran before leaves nothing behind
    log.info("idle")
    record = text_log.makeRecord("shop.orders", logging.INFO, __file__, 1, "idle", (), None)
    text_log.handle(record)
    assert json.loads(json_lines[0]).keys() == {"timestamp", "level", "logger", "message"}
    assert text_lines == [old.format(record)]


def test_a_text_line_in_a_job_ends_with_the_job_fields_before_any_traceback() -> None:
    log, lines = logger_to(TextFormatter())
    with running(a_job()):
        try:
            raise ValueError("card declined")
        except ValueError:
            log.exception("charging failed")
    first, *traceback = lines[0].splitlines()
    assert first.endswith(" shop.orders: charging failed "
                          "[jid=0123abcd job=send_receipt queue=mail attempt=1]")
    assert traceback[0] == "Traceback (most recent call last):"
    assert traceback[-1] == "ValueError: card declined"


def test_an_exception_s_traceback_is_in_the_json_line() -> None:
    log, lines = logger_to(JsonFormatter())
    try:
        raise ValueError("card declined")
    except ValueError:
        log.exception("charging failed")
    log.info("no exception here")
    failed, fine = map(json.loads, lines)
    assert failed["level"] == "ERROR"
    assert failed["exception"].startswith("Traceback (most recent call last):")
    assert failed["exception"].endswith("ValueError: card declined")
    assert "exception" not in fine


def test_extras_that_serialise_are_kept_and_others_left_out() -> None:
    log, lines = logger_to(JsonFormatter())
    extra: dict[str, Any] = {"order": 7, "tags": ["gift"], "total": {"eur": 9.5},
                             "customer": object(), "ratio": math.nan, "level": "spoof"}
    log.info("placed", extra=extra)
    fields = json.loads(lines[0])
    assert fields["order"] == 7
    assert fields["tags"] == ["gift"]
    assert fields["total"] == {"eur": 9.5}
    assert "customer" not in fields  # not JSON
    assert "ratio" not in fields  # NaN is not JSON either
    assert fields["level"] == "INFO"  # an extra never replaces a fixed key


def test_a_message_over_several_lines_stays_one_json_line() -> None:
    log, lines = logger_to(JsonFormatter())
    log.info("first\nsecond \u2603")
    assert "\n" not in lines[0]
    assert json.loads(lines[0])["message"] == "first\nsecond \u2603"


def test_fields_passed_with_extra_carry_a_job_outside_its_run() -> None:
    """As the worker's "done"/"failed" lines do, logged after the run has ended."""
    log, lines = logger_to(JsonFormatter())
    log.info("done", extra=job_fields(a_job(attempt=3)))
    fields = json.loads(lines[0])
    assert (fields["jid"], fields["job"], fields["queue"], fields["attempt"]) == (
        "0123abcd", "send_receipt", "mail", 3)


def test_an_unknown_format_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml': use 'text' or 'json'"):
        configure(logging.INFO, "xml")


@contextmanager
def bare_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """The root logger as in a fresh ``cogworker-async run`` process: no handlers (pytest's
    own, added around the test's body, are set aside and put back); stderr is a buffer."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    for handler in saved:
        root.removeHandler(handler)
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    try:
        yield stderr
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(level)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_configure_logs_to_stderr_at_the_level_with_the_job_fields(
    monkeypatch: pytest.MonkeyPatch, fmt: str,
) -> None:
    with bare_root(monkeypatch) as stderr:
        configure(logging.INFO, fmt)
        log = logging.getLogger("shop.orders")
        log.debug("below the level")
        log.info("outside")
        with running(a_job()):
            log.info("inside")
    outside, inside = stderr.getvalue().splitlines()
    if fmt == "json":
        assert "jid" not in json.loads(outside)
        assert json.loads(inside)["jid"] == "0123abcd"
    else:
        assert outside.endswith(" INFO shop.orders: outside")
        assert inside.endswith(" INFO shop.orders: inside "
                               "[jid=0123abcd job=send_receipt queue=mail attempt=1]")


def test_configure_leaves_a_logging_set_up_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Like logging.basicConfig: the application's own handlers win."""
    own = io.StringIO()
    with bare_root(monkeypatch) as stderr:
        logging.getLogger().addHandler(logging.StreamHandler(own))
        configure(logging.INFO, "json")
        logging.getLogger("shop.orders").warning("plain")
    assert own.getvalue() == "plain\n"
    assert stderr.getvalue() == ""


FORGED: Final = "send\n2026-01-01 00:00:00,000 INFO cogworker_async: all clear\x1b[2J\x07"
"""A job class as a co-tenant could write it into a payload: a forged line, an ANSI
erase-screen, a bell."""


def test_the_worker_s_text_lines_escape_what_a_payload_holds() -> None:
    logger = logging.Logger("cogworker_async.worker.processor", logging.DEBUG)
    handler = Lines(TextFormatter())
    logger.addHandler(handler)
    job = JobContext(jid="j\r\n1", name=FORGED, queue="mail", attempt=1, enqueued_at=None,
                     created_at=None, payload={}, _orphanings=a_job()._orphanings)
    logger.warning("failed: %s jid=%s", FORGED, "x\u2028y")
    with running(job):
        logger.info("running")
    assert len(handler.lines) == 2
    for line in handler.lines:
        assert "\n" not in line
        assert "\r" not in line
        assert "\x1b" not in line
        assert "\x07" not in line
        assert "\u2028" not in line
    assert "failed: send\\n2026-01-01 00:00:00,000 INFO cogworker_async: all clear" \
           "\\x1b[2J\\x07 jid=x\\u2028y" in handler.lines[0]
    assert handler.lines[1].endswith("[jid=j\\r\\n1 job=send\\n2026-01-01 00:00:00,000 INFO "
                                     "cogworker_async: all clear\\x1b[2J\\x07 queue=mail "
                                     "attempt=1]")


def test_an_application_s_own_text_lines_are_left_as_they_are() -> None:
    log, lines = logger_to(TextFormatter())
    log.info("two\nlines")
    assert lines[0].endswith("shop.orders: two\nlines")


EMBEDDED: Final = """
import asyncio, logging, sys
from cogworker_async import App

jobs = App(sys.argv[1], namespace=sys.argv[2], poll_interval=0.05)
if sys.argv[3] == "own":
    logging.basicConfig(stream=sys.stdout, format="own: %(message)s", level=logging.INFO)

@jobs.job(retry=0)
async def broken() -> None:
    raise ValueError("bad feed")

async def main() -> None:
    async with jobs.worker():
        jid = await broken.enqueue()
        while (await jobs.status(jid)).state != "dead":
            await asyncio.sleep(0.02)
    await jobs.close()

asyncio.run(main())
"""


@pytest.mark.parametrize("setup", ["none", "own"])
def test_an_embedded_worker_is_heard_when_nobody_set_up_logging(
    redis_url: str, namespace: str, setup: str,
) -> None:
    """Under uvicorn (which sets up its own loggers only) a worker in the lifespan said
    nothing; with the application's own logging, its lines go there, once."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", EMBEDDED, redis_url, namespace, setup],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    if setup == "none":
        assert " INFO cogworker_async.worker.manager: worker " in done.stderr
        assert "ValueError: bad feed" in done.stderr
        assert done.stdout == ""
    else:
        assert done.stderr == ""
        assert done.stdout.count("started: queues") == 1
