"""Three worker processes and per-second cron jobs for 10 s: each tick is enqueued
exactly once, and runs of one periodic job never overlap."""

from __future__ import annotations

import calendar
import itertools
import json
import re
import time

import anyio
import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.worker.e2e.cronapp import LONG_RUN
from tests.workerproc import WorkerProcess

pytestmark = pytest.mark.slow

RUN_FOR = 10.0


async def test_three_processes_enqueue_each_tick_once_and_never_overlap(
    redis_url: str, namespace: str, r: redis.asyncio.Redis
) -> None:
    workers = [WorkerProcess(redis_url, namespace, {}, [], target="tests.worker.e2e.cronapp:jobs")
               for _ in range(3)]
    try:
        for worker in workers:
            worker.start()
        # The run is paced from the first tick that ran, not from the start: three
        # processes importing and connecting to a cluster on a loaded machine can take
        # seconds before the first tick, which is start-up, not the scheduler's doing.
        started = time.time()
        while not await r.llen(f"{namespace}:cron:ticks"):
            for worker in workers:
                assert worker.alive(), worker.log()
            assert time.time() - started < 60, "no tick ran within 60 s of the start"
            await anyio.sleep(0.1)
        began = time.time()
        while time.time() - began < RUN_FOR:  # pacing the run, not waiting for luck
            for worker in workers:
                assert worker.alive(), worker.log()
            await anyio.sleep(0.5)
        for worker in workers:
            await worker.stop(timeout=15)
    finally:
        logs = [worker.log() for worker in workers]
        for worker in workers:
            worker.cleanup()

    ticks = sorted(float(t) for t in await r.lrange(f"{namespace}:cron:ticks", 0, -1))
    assert len(ticks) == len(set(ticks)), "a tick was enqueued (and run) twice"

    text = "".join(logs)
    # From the first tick on, each second ran or was skipped for an overlap (said in the
    # log), but for the last one or two: enqueued, still queued when the workers stopped.
    assert len(ticks) + text.count("periodic tick: skipped") >= RUN_FOR - 1, (ticks, logs)
    # Each second was enqueued exactly once across the three processes, none skipped...
    enqueued = [_epoch(stamp) for stamp in re.findall(r"cron: enqueued tick for (\S+ \S+)",
                                                      text)]
    assert len(enqueued) == len(set(enqueued)), f"a tick was enqueued twice: {logs}"
    # A second can go unclaimed only if all three processes were stalled past it (the
    # design runs the latest due tick, not a flood); the ticker then says so, and only
    # those seconds may be absent.
    said_missed = set()
    for first, last in re.findall(r"cron: tick missed \d+ tick\(s\) between (\S+ \S+) "
                                  r"and (\S+ \S+)", text):
        said_missed.update(range(_epoch(first) + 1, _epoch(last)))
    assert sorted(enqueued) == [t for t in range(min(enqueued), max(enqueued) + 1)
                                if t not in said_missed], logs
    # ...and each one ran, unless it was skipped because the previous run still held
    # the running lock (a periodic job never overlaps itself; under load at start-up a
    # run can end after the next second has begun). Either way, said in the log.
    overlaps = text.count("periodic tick: skipped")
    missed = [t for t in enqueued if ticks[0] < t < ticks[-1] and t not in ticks]
    assert len(missed) <= overlaps, f"a tick did not run: {missed}; ran: {ticks}; {logs}"

    spans = sorted(json.loads(s) for s in await r.lrange(f"{namespace}:cron:spans", 0, -1))
    assert len(spans) >= 2
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 0.01, f"two runs overlapped: {spans}"
    assert all(e - s >= LONG_RUN - 0.01 for s, e in spans)
    claimed = await r.hgetall(Keys(namespace).cron_claimed("default"))
    assert set(claimed) == {b"tick", b"long"}


def _epoch(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
