"""What ``arq arq_app.WorkerSettings`` imports: arq's settings class (its documented
form) with the jobs of ``arq_peer.py``; ``poll_delay`` 0.5 s (arq's default) or 10 ms
(``BENCH_MODE=poll10ms``), ``max_jobs`` = the benchmark's concurrency (arq's default is
10 too). ``LOG_CONFIG`` is for ``--custom-log-dict``: arq's own config logs every job at
INFO; this one logs at WARNING, as every system does here.

arq's ``Worker`` takes its loop from ``asyncio.get_event_loop()`` after importing this
module: uvloop's policy is set here, as an arq user can.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import common
import uvloop
from arq.connections import RedisSettings
from arq.worker import func
from arq_peer import noop, probe, sleep

asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

_ARGS = common.app_args()


class WorkerSettings:
    functions: ClassVar[list[Any]] = [func(noop, name="noop"), func(sleep, name="sleep"),
                                      func(probe, name="probe")]
    redis_settings = RedisSettings.from_dsn(_ARGS.redis_url)
    max_jobs = _ARGS.concurrency
    poll_delay = 0.01 if _ARGS.mode == "poll10ms" else 0.5


LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"arq.standard": {"level": "WARNING", "class": "logging.StreamHandler"}},
    "loggers": {"arq": {"handlers": ["arq.standard"], "level": "WARNING"}},
}
