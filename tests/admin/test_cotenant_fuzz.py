"""A co-tenant's garbage in every key the project reads (tests/admin/cotenant.py):
wrong Redis types, JSON nested past the parser's limit, huge values, bytes that are not
UTF-8, infinite, NaN and huge numbers, empty values. Whatever is planted, ``run --burst``
exits, a worker goes on running jobs, recovery takes a dead process's jobs whatever its
beat info says, and the workflows beside the garbage end (issue 25, items 8-11).
tests/admin/test_cotenant_readers.py holds the readers' side: every dashboard page
answers (never a 500), every CLI command exits 0.

Sizes: ``make test`` plants every key with another type and with a few values that broke
readers, and starts a worker or ``--burst`` for a handful of them; ``COGWORKER_CHAOS=full``
(``make chaos``) plants every value in every key and runs every check on each.
Each check walks its table and reports every planting that failed, not the first.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Iterator
from typing import Any, Final

import pytest
import redis

from cogworker_async import App
from cogworker_async.errors import CogworkerError, WrongTypeKey
from cogworker_async.jobs.signature import callback_jid
from cogworker_async.redis.store import Store
from tests.admin.cotenant import (
    BID,
    DEDUP_KEY,
    FULL,
    GHOST,
    JID,
    PARENT,
    PLANTINGS,
    QUEUE,
    WAITER,
    WORKFLOW_LABELS,
    Planting,
    fresh,
    jobs_on_namespace,
    plant,
    report,
    served_jobs,
)
from tests.cli import adminapp
from tests.conftest import FAST
from tests.waiting import wait_until
from tests.workerproc import WorkerProcess

pytestmark = [pytest.mark.timeout(1800 if FULL else 120),
              *([pytest.mark.chaos] if FULL else [])]

WORKER_SHORT: Final = frozenset({"beat info", "processes", "queue's processes", "last beats",
                                 "recoveries", "workers hash", "hand-over list", "queue"})
"""Keys a worker's loops read, whose plantings the short run starts a worker for."""
BEAT_WRITES: Final = frozenset({"processes", "last beats", "queue's processes",
                                "queue's last beats"})
"""Keys the beat script writes: of another type, the worker refuses to start."""
BURST_SHORT: Final = frozenset({"queue", "schedule", "retry set", "pause flag"})
BURST_FULL_GARBAGE: Final = frozenset({"deep JSON list", "not UTF-8", "infinite fields",
                                       "huge integer fields"})
"""Values the full run plants in every key for ``--burst`` (a process each: ~2 s)."""
RECOVERY_TIMEOUT: Final = 15.0
"""Seconds a worker may take to recover the dead process's job and run a new one."""
BURST_TIMEOUT: Final = 30.0
"""Seconds ``run --burst`` may take to start (imports on a busy 2-core machine) and end."""

def chosen(short: frozenset[str], full_garbage: frozenset[str] | None = None
           ) -> list[Planting]:
    """Full: every planting (of ``full_garbage`` only, when given: each case starts a
    process); short: the keys in ``short``, with another type or deep JSON."""
    if FULL:
        return [p for p in PLANTINGS if full_garbage is None or p.wrong_type
                or p.garbage.name in full_garbage]
    return [p for p in PLANTINGS if p.spec.label in short and (
        p.wrong_type or p.garbage.name == "deep JSON list")]


jobs = pytest.fixture(name="jobs")(jobs_on_namespace)
served = pytest.fixture(name="served")(served_jobs)


async def test_a_worker_recovers_the_dead_and_goes_on_whatever_a_key_holds(
        served: adminapp.Jobs, store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """Recovery of a dead process never waits on its beat info (or anything else it
    reads): its job is taken from its list, and a new job runs unless the planting
    paused the queue or took its list. Where the worker cannot write its beat it
    refuses to start, naming the key; where the queue's list is another type the dead
    process's job stays on its list (never lost) and the worker goes on."""
    failures = []
    cases = chosen(WORKER_SHORT)
    for planting in cases:
        await fresh(store)
        await plant(store, planting)
        caplog.clear()
        try:
            await run_worker(served, store, planting, caplog)
        except Exception as exc:
            failures.append(f"{planting.id}: {exc!r}")
    report("cotenant_fuzz", failures, len(cases))


async def run_worker(jobs: adminapp.Jobs, store: Store, planting: Planting,
                     caplog: pytest.LogCaptureFixture) -> None:
    ghost_list = store.keys.in_progress(QUEUE, GHOST)
    key = planting.spec.name(store.keys)
    if planting.wrong_type and planting.spec.label in BEAT_WRITES:
        with pytest.raises(BaseExceptionGroup) as refused:
            async with jobs.app.worker(concurrency=2):
                pass
        assert key in str(refused.value.exceptions), refused.value.exceptions
        assert await store.client.llen(ghost_list) == 1  # still there: not lost
        return
    async with jobs.app.worker(concurrency=2):
        if planting.wrong_type and planting.spec.label == "queue":
            await wait_until(lambda: "is not a list in Redis" in caplog.text,
                             timeout=RECOVERY_TIMEOUT)
            assert await store.client.llen(ghost_list) == 1  # kept until it can move
            return
        await wait_until(lambda: _empty(store, ghost_list), timeout=RECOVERY_TIMEOUT)
        if planting.spec.label in ("queue", "pause flag"):
            return  # a pause is a pause; a queue of garbage is filed in dead first
        jid = await jobs.ok.enqueue("after the garbage")
        assert jid is not None
        await wait_until(lambda: _finished(jobs.app, jid), timeout=RECOVERY_TIMEOUT)


async def _empty(store: Store, key: str) -> bool:
    try:
        return int(await store.client.llen(key)) == 0
    except redis.exceptions.ResponseError:
        return True  # the planting took the list's place: nothing left to recover there


async def _finished(app: App, jid: str) -> bool:
    return (await app.status(jid)).state == "succeeded"


@pytest.fixture
def burst_log() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for process in started:
        process.kill()
        process.cleanup()


async def test_burst_exits_whatever_a_key_holds(served: adminapp.Jobs, store: Store,
                                                redis_url: str, namespace: str,
                                                burst_log: list[WorkerProcess]) -> None:
    failures = []
    cases = chosen(BURST_SHORT, BURST_FULL_GARBAGE)
    for planting in cases:
        await fresh(store)
        await store.client.delete(store.keys.in_progress(QUEUE, GHOST))
        await plant(store, planting)
        process = WorkerProcess(redis_url, namespace, FAST, ["--burst"],
                                target=adminapp.TARGET,
                                env={adminapp.NAMESPACE_ENV: namespace,
                                     "COGWORKER_REDIS_URL": redis_url})
        burst_log.append(process.start())
        try:
            code = await process.wait_exit(BURST_TIMEOUT)
        except Exception as exc:
            # Killed here, not at teardown: left running, it would take the next case's
            # job from under its set-up (fresh()'s dead process's job).
            process.kill()
            failures.append(f"{planting.id}: --burst did not exit: {exc!r}\n"
                            f"{process.log()[-1500:]}")
            continue
        if planting.wrong_type and planting.spec.label in BEAT_WRITES:
            # As a worker does (test_a_worker_recovers_...): it refuses to start, naming
            # the key it cannot write its beat to (exit 2, a usage error).
            if code != 2 or planting.spec.name(store.keys) not in process.log():
                failures.append(f"{planting.id}: --burst exited {code} without naming "
                                f"the key\n{process.log()[-1500:]}")
        elif code != 0:
            failures.append(f"{planting.id}: --burst exited {code}\n{process.log()[-1500:]}")
    report("cotenant_fuzz", failures, len(cases))


CLEAN: Final = "clean"
"""A queue no planting touches: the workflows that must go on beside the garbage."""
WORKFLOW_SHORT_GARBAGE: Final[frozenset[str]] = frozenset()
"""Short: the workflow keys with another type only (their garbage values are read by
the pages' and commands' checks); full: every value too."""
NAMESPACE_WIDE: Final = frozenset({"batch index", "open batch index", "firing set",
                                   "held batch index"})
"""Keys every batch's open or end writes: of another type, a new batch is refused at its
open (``WrongTypeKey``, naming the key: never half made, never one whose callbacks could
not fire)."""
DEDUP_MODES: Final[tuple[dict[str, Any], ...]] = (
    {"throttle": 60.0}, {"debounce": 0.1}, {"coalesce": True})


async def test_workflows_go_on_whatever_a_workflow_key_holds(
        store: Store, redis_url: str, namespace: str) -> None:
    """Garbage in a key of workflows and who-runs-next (a batch's hash and sets, the
    batch indexes, watchers, a waiting copy and its sets, group rings and lists,
    priority lists and levels, dedup keys, notes): readers answer (``batch_status``,
    ``status``); a dedup enqueue on the planted key answers or raises the project's own
    error; a worker goes on — it recovers the dead process's job, and on a clean queue a
    batch (its callback), a parent and its dependent all end. What cannot be read is
    skipped (with a log line); nothing beside it is lost."""
    built = adminapp.build(namespace, redis_url, queues=[QUEUE, CLEAN], track_jobs=True)
    failures = []
    cases = [p for p in PLANTINGS if p.spec.label in WORKFLOW_LABELS and (
        FULL or p.wrong_type or p.garbage.name in WORKFLOW_SHORT_GARBAGE)]
    try:
        for planting in cases:
            await fresh(store)
            await plant(store, planting)
            try:
                await _workflows_go_on(built, store, planting)
            except Exception as exc:
                failures.append(f"{planting.id}: {exc!r}\n{traceback.format_exc()[-1200:]}")
    finally:
        await built.app.close()
    report("cotenant_fuzz", failures, len(cases))


async def _workflows_go_on(jobs: adminapp.Jobs, store: Store, planting: Planting) -> None:
    app = jobs.app
    for jid in (PARENT, WAITER, JID):
        await app.status(jid)
    await app.batch_status(BID)
    for mode in DEDUP_MODES:
        try:
            await jobs.ok.options(key=DEDUP_KEY, **mode).enqueue("dedup")
        except CogworkerError:
            pass  # refused, naming the key: nothing half done
    async with app.worker(concurrency=4):
        ghost_list = store.keys.in_progress(QUEUE, GHOST)
        await wait_until(lambda: _empty(store, ghost_list), timeout=RECOVERY_TIMEOUT)
        clean = jobs.ok.options(queue=CLEAN)
        try:
            async with app.batch("clean", on_complete=clean.s("clean-callback")) as batch:
                member = await clean.enqueue("clean-member")
        except WrongTypeKey as exc:
            key = planting.spec.name(store.keys)
            if planting.wrong_type and planting.spec.label in NAMESPACE_WIDE and exc.key == key:
                batch = None
            else:
                raise
        parent = await clean.enqueue("clean-parent")
        assert parent is not None
        dependent = await clean.options(after=[parent]).enqueue("clean-dependent")
        assert dependent is not None
        ended = [parent, dependent]
        if batch is not None:
            assert member is not None
            ended += [member, callback_jid(batch.bid, "complete")]
        for jid in ended:
            await wait_until(functools.partial(_finished, app, jid), timeout=RECOVERY_TIMEOUT)
