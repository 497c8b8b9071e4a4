"""Scenario — kept results under a SIGKILL storm.

The storm of test_sigkill_storm (same machinery, sizes and kills), run with a job that
keeps its result (``valuesapp.valued``: ``{"n": n, "pid": pid}``, ``n`` derived from its
arguments). A result is written by the script that acks the run (lua/ack.lua), and only
when that ack found the job on its process's list: a run killed before its ack leaves no
result, and its recovered run writes the one result.

Must hold, besides the storm's own checks (nothing lost, reruns only of what a dead
process held, everything clean at the end), reading every status record of the
namespace (``<ns>:{*}:job:*``):
- one record per jid, across every queue's slot, and one for each job enqueued;
- every job (acked: on no list) says ``succeeded`` and has its result, the right one
  (``n`` of its arguments), written by its last run (the pid that finished it last:
  a run that finished but died before its ack wrote nothing);
- every record with a result says ``succeeded``; a result's record has a TTL;
- jobs recovered and run again end with one result like the others.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, Final

import pytest
import redis.asyncio

from cogworker_async.jobs import status
from cogworker_async.redis.keys import Keys
from tests.redis.lua.helpers import stored_record
from tests.servers import ServerProcess
from tests.worker.chaos.processes import chaosapp, valuesapp
from tests.worker.chaos.processes.conftest import (
    SCALE,
    Clock,
    Fleet,
    marks,
    report,
    wait_ready,
)
from tests.worker.chaos.processes.test_sigkill_storm import (
    CONCURRENCY,
    SIZES,
    WORKERS,
    Size,
    Storm,
    _check_clean,
    _check_runs,
    _stop_all,
    _storm,
)
from tests.workerproc import WorkerProcess

pytestmark = marks(short_timeout=120, full_timeout=900)

ENQUEUE_BATCH: Final = 500


class ValuesFleet(Fleet):
    """A chaos fleet's processes, running valuesapp's jobs (the fleet's teardown kills
    them by pid and prints their logs on failure)."""

    def __init__(self, fleet: Fleet) -> None:
        super().__init__(fleet.url, fleet.namespace)
        self.started = fleet.started

    def start(self, *args: str, **settings: Any) -> WorkerProcess:
        return valuesapp.start_in(self, *args, **settings)


@pytest.fixture
async def values(server: ServerProcess, namespace: str) -> AsyncIterator[valuesapp.Jobs]:
    built = valuesapp.build(server.url, namespace)
    yield built
    await built.app.close()


def n_of(i: int) -> int:
    """The value job ``i`` derives its result from (its second argument)."""
    return 7 * i + 3


async def _enqueue(values: valuesapp.Jobs, size: Size,
                   rng: random.Random) -> dict[str, tuple[str, int]]:
    """tag -> (jid, n) of each job enqueued."""
    low, high = size.seconds
    calls: list[tuple[tuple[str, int, float], dict[str, Any]]] = [
        ((f"j{i}", n_of(i), round(rng.uniform(low, high), 3)), {}) for i in range(size.jobs)]
    found = {}
    for start in range(0, len(calls), ENQUEUE_BATCH):
        batch = calls[start:start + ENQUEUE_BATCH]
        jids = await values.valued.enqueue_many(batch)
        for ((tag, n, _), _), jid in zip(batch, jids, strict=True):
            assert jid is not None
            found[tag] = (jid, n)
    return found


async def _records(r: redis.asyncio.Redis,
                   namespace: str) -> dict[str, list[tuple[str, status.JobStatus, int]]]:
    """jid -> (queue, status, TTL) of each status record of the namespace, any queue."""
    keys = Keys(namespace)
    found: dict[str, list[tuple[str, status.JobStatus, int]]] = {}
    async for raw in r.scan_iter(match=f"{namespace}:{{*}}:job:*", count=1000):
        key = raw.decode()
        queue = keys.queue_name_of(key)
        jid = key[len(keys.record_prefix(queue)):]
        read = status.read(jid, await stored_record(r, keys, queue, jid))
        found.setdefault(jid, []).append((queue, read, int(await r.ttl(key))))
    return found


def _last_finisher(ends: list[tuple[str, int]]) -> dict[str, int]:
    """tag -> the pid that recorded its last finish."""
    return dict(ends)  # later entries win


def _check_results(jobs: dict[str, tuple[str, int]],
                   records: dict[str, list[tuple[str, status.JobStatus, int]]],
                   last: dict[str, int]) -> None:
    """Assert one record per job, each with its one right result."""
    twice = {jid: [queue for queue, _, _ in found] for jid, found in records.items()
             if len(found) != 1}
    assert not twice, f"jids with more than one record: {twice}"
    assert set(records) == {jid for jid, _ in jobs.values()}, "records of unknown jids"
    for jid, ((_, read, ttl),) in records.items():
        assert not read.has_result or read.state == "succeeded", (jid, read)
        assert ttl > 0, f"record {jid} has no TTL ({ttl})"
    wrong = {}
    for tag, (jid, n) in jobs.items():
        ((queue, read, _),) = records[jid]
        expected = {"n": n, "pid": last.get(tag)}
        if (queue, read.state, read.has_result, read.result) != (
                "default", "succeeded", True, expected):
            wrong[tag] = (read.state, read.has_result, read.result, expected)
    assert not wrong, f"{len(wrong)} job(s) without their one right result: " \
                      f"{dict(list(wrong.items())[:10])}"


async def test_results_under_a_sigkill_storm_are_one_per_job_and_right(
    r: redis.asyncio.Redis, values: valuesapp.Jobs, fleet: Fleet, namespace: str
) -> None:
    size = SIZES[SCALE]
    seed = int(os.environ.get("COGWORKER_CHAOS_SEED") or random.randrange(2**32))
    print(f"seed {seed} (COGWORKER_CHAOS_SEED to replay)")
    rng = random.Random(seed)
    workers_fleet = ValuesFleet(fleet)
    workers = [workers_fleet.start(concurrency=CONCURRENCY) for _ in range(WORKERS)]
    await wait_ready(r, namespace, workers)
    jobs = await _enqueue(values, size, rng)
    tags = list(jobs)
    storm = Storm(r, namespace, workers_fleet, Clock(), rng, workers)

    await _storm(storm, size, tags)
    took = storm.clock()
    await _stop_all(r, namespace, storm.workers)

    starts = await chaosapp.counts(r, chaosapp.started_key(namespace))
    ends = await chaosapp.runs(r, chaosapp.finished_key(namespace))
    finishes = Counter(tag for tag, _ in ends)
    figures = _check_runs(tags, storm.kills, starts, finishes)
    records = await _records(r, namespace)
    _check_results(jobs, records, _last_finisher(ends))
    rerun = [tag for tag in tags if starts[tag] > 1]
    report("results_storm", jobs=len(tags), kills=len(storm.kills),
           records=sum(len(found) for found in records.values()),
           results=sum(read.has_result for found in records.values() for _, read, _ in found),
           runs_gt1=len(rerun), finished_gt1=sum(finishes[tag] > 1 for tag in tags),
           rerun_with_one_right_result=len(rerun), seconds=round(took, 1),
           **{k: v for k, v in figures.items() if k != "lost"})
    assert len(storm.kills) >= 2, "the jobs were done before a second kill"
    assert rerun, "no job was recovered and run again: the storm proved nothing here"
    await _check_clean(r, namespace)
