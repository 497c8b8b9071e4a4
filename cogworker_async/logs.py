"""Logs: the running job's identity on every log line, and JSON lines for log pipelines.

Two pieces, one per concern, so that either can be used alone:

- ``JobContextFilter`` stamps ``jid``, ``job``, ``queue`` and ``attempt`` on each record
  logged while a job runs (read from the job context, ``context.CURRENT``, which the worker
  sets around each run — also inside a plain function's thread). Attached to a *handler*,
  it sees the records of every logger: the worker's and the job's own.
- ``JsonFormatter`` writes one JSON object per line: timestamp (ISO-8601, UTC), level,
  logger, message, the job fields, the JSON-serialisable ``extra=`` fields, and the
  exception's text when there is one.

``configure(level, fmt)`` is what ``cogworker-async run`` calls; embedded users attach the
two to their own handlers::

    handler.setFormatter(JsonFormatter())
    handler.addFilter(JobContextFilter())

Why a filter over a context variable, not a ``LoggerAdapter``: the user's code logs
through its own loggers, which the worker cannot wrap; a handler's filter runs in the
logging call's own task or thread, where the job's context is visible.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final

from cogworker_async.jobs.context import CURRENT, JobContext

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The text line ``cogworker-async run`` has always written (the default)."""
FORMATS: Final = ("text", "json")
"""The formats ``configure`` (and ``--log-format``) accept."""
JOB_FIELDS: Final = ("jid", "job", "queue", "attempt")
"""The record attributes ``JobContextFilter`` sets while a job runs."""
TIMESTAMP_PRECISION: Final = "milliseconds"
"""As the text format's ``asctime``: enough to order lines, short to read."""

# What every LogRecord has (and "message"/"asctime", which formatters add): the rest of a
# record's attributes came from ``extra=`` (or a filter). Read from a real record so a
# Python version's new attribute (3.12's ``taskName``) is never mistaken for an extra.
_RECORD_ATTRIBUTES: Final = frozenset(
    vars(logging.LogRecord("", logging.NOTSET, "", 0, "", (), None))) | {"message", "asctime"}
_FIXED_KEYS: Final = frozenset({"timestamp", "level", "logger", "message", "exception",
                                "stack"})
"""JsonFormatter's own keys: an extra of one of these names is left out, never replaces it."""


def job_fields(job: JobContext) -> dict[str, str | int]:
    """A job's log fields, e.g. for ``extra=`` on a line logged about a job outside its
    run (the worker's "done"/"failed" lines)."""
    return {"jid": job.jid, "job": job.name, "queue": job.queue, "attempt": job.attempt}


class JobContextFilter(logging.Filter):
    """Adds ``jid``, ``job``, ``queue``, ``attempt`` to records logged while a job runs.

    Attach it to a handler (``handler.addFilter(JobContextFilter())``), not a logger: a
    logger's filter sees only that logger's own calls. Outside a job it changes nothing.
    It never drops a record. A field the call already set with ``extra=`` is kept.
    With a ``QueueHandler``, attach it to the ``QueueHandler``: the listener's thread
    does not run in the job's context.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        job = CURRENT.get(None)
        if job is not None:
            attributes = record.__dict__
            for key, value in job_fields(job).items():
                attributes.setdefault(key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line (ASCII: a newline or odd character in a message is
    escaped, never splits or breaks the line).

    Keys: ``timestamp`` (ISO-8601, UTC), ``level``, ``logger``, ``message``; then the job
    fields (``jid``, ``job``, ``queue``, ``attempt``; set by ``JobContextFilter``); then
    each ``extra=`` field whose value is JSON-serialisable (others are left out, as is an
    extra named like one of the fixed keys); ``exception`` (the traceback text) and
    ``stack`` when the record has them. A format string given to it (e.g. by
    ``logging.config.dictConfig``) is ignored.
    """

    def format(self, record: logging.LogRecord) -> str:
        head: dict[str, object] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec=TIMESTAMP_PRECISION),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        extras = {key: value for key, value in record.__dict__.items()
                  if key not in _RECORD_ATTRIBUTES and key not in _FIXED_KEYS}
        tail: dict[str, object] = {}
        exception = self._exception_text(record)
        if exception:
            tail["exception"] = exception
        if record.stack_info:
            tail["stack"] = self.formatStack(record.stack_info)
        try:
            return json.dumps(_ordered(head, extras, tail), allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            # An extra is not serialisable: keep the others (checked one by one only
            # now, so a line of plain values is dumped once).
            return json.dumps(_ordered(head, _serialisable(extras), tail), allow_nan=False)

    def _exception_text(self, record: logging.LogRecord) -> str:
        # Cached on the record, as logging.Formatter does: another handler reuses it.
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        return record.exc_text or ""


class TextFormatter(logging.Formatter):
    """The text line (``TEXT_FORMAT`` by default), with ``[jid=… job=… queue=… attempt=…]``
    after the message of a line logged in a job (``JobContextFilter``); other lines are
    exactly ``logging.Formatter``'s."""

    def __init__(self, fmt: str | None = None, *args: Any, **kwargs: Any) -> None:
        # logging.Formatter's signature, so dictConfig can build one ("class": ...).
        super().__init__(fmt or TEXT_FORMAT, *args, **kwargs)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        # Here, not in format(): the suffix belongs on the message's line, before any
        # traceback that format() appends.
        text = super().formatMessage(record)
        if record.name.startswith(OWN_LOGGERS):
            # The worker's own lines quote payloads (a class, a jid, a queue), which
            # anyone who can write to Redis chooses: a newline there would forge a line,
            # an ANSI escape repaint the terminal. The application's own lines are its own.
            text = escaped(text)
        attributes = record.__dict__
        if "jid" not in attributes or f"jid={escaped(str(attributes['jid']))}" in text:
            return text  # not in a job, or a line that names its job already
        fields = " ".join(f"{key}={escaped(str(attributes[key]))}" for key in JOB_FIELDS
                          if key in attributes)
        return f"{text} [{fields}]"


OWN_LOGGERS: Final = "cogworker_async"
"""The prefix of the loggers whose text lines are escaped (``TextFormatter``)."""

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escaped(text: str) -> str:
    """``text`` with control characters (newlines, ANSI escapes, BEL, C1, the Unicode
    line separators) shown as Python escapes (``\\n``, ``\\x1b``): one line, inert."""
    if _CONTROL.search(text) is None:
        return text  # the common case, at the cost of one scan
    return _CONTROL.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"),
                        text)


def formatter_for(fmt: str) -> logging.Formatter:
    """The formatter for a format name (one of ``FORMATS``); ValueError for another."""
    if fmt == "text":
        return TextFormatter()
    if fmt == "json":
        return JsonFormatter()
    raise ValueError(f"unknown log format {fmt!r}: use {' or '.join(map(repr, FORMATS))}")


def configure(level: int, fmt: str) -> None:
    """Log to stderr at ``level`` in ``fmt`` ("text" or "json"), with the job fields on
    lines logged in a job; ValueError for another format.

    Like ``logging.basicConfig`` (which it calls): it does nothing if the root logger
    already has handlers, so an application's own logging set-up wins.
    """
    handler = logging.StreamHandler()
    handler.setFormatter(formatter_for(fmt))
    handler.addFilter(JobContextFilter())
    logging.basicConfig(level=level, handlers=[handler])


@contextmanager
def heard(level: int = logging.INFO) -> Iterator[None]:
    """For the duration of the block, the worker's own lines reach stderr if nobody has
    set up logging: a worker embedded under uvicorn (which configures its own loggers,
    not the root) or in a plain script would otherwise say nothing of its start, its stop
    or a failing job (Python's last resort prints warnings only, bare). Any handler on
    the root or on ``cogworker_async`` means the application decides: nothing is added."""
    logger = logging.getLogger("cogworker_async")
    if logging.getLogger().handlers or logger.handlers:
        yield
        return
    handler = logging.StreamHandler()
    handler.setFormatter(TextFormatter())
    handler.addFilter(JobContextFilter())
    handler.setLevel(level)
    before = logger.level
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


def _ordered(head: Mapping[str, object], extras: Mapping[str, object],
             tail: Mapping[str, object]) -> dict[str, object]:
    """The fixed keys, then the job fields, then the other extras, then the exception
    (long, so last: the short fields stay readable at the head of the line)."""
    job = {key: extras[key] for key in JOB_FIELDS if key in extras}
    return {**head, **job, **extras, **tail}  # a key keeps its first place: job fields first


def _serialisable(extras: Mapping[str, object]) -> dict[str, object]:
    kept: dict[str, object] = {}
    for key, value in extras.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            continue
        kept[key] = value
    return kept
