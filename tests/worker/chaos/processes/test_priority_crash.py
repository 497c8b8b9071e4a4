"""Scenario — priorities through a crash, on one Redis and on a 3-master cluster: worker
A (one slot, prefetch 5) runs a priority-10 job that holds and has fetched five
priority-7 jobs it has not started;
then priority-0 and priority -1 jobs are enqueued, A is SIGKILLed, and worker B (two
slots) starts on the lower jobs while A's list waits for recovery.

Recovery (``requeue.lua``) puts each job back on its own priority's list, at its front.
Must hold:
- B starts the recovered priority-7 jobs one after another, ahead of every lower job
  still waiting (the lower jobs B started before recovery are the only ones before);
- apart from that block, B starts jobs by priority: every 0 before every -1;
- every job runs, and none finishes twice.
"""

from __future__ import annotations

import signal
from typing import Final

from tests.clients import async_client, is_cluster_url
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp
from tests.worker.chaos.processes.conftest import (
    FULL,
    READY_TIMEOUT,
    Fleet,
    marks,
    report,
    wait_ready,
)
from tests.workerproc import WorkerProcess

pytestmark = marks(short_timeout=120, full_timeout=300)

PLAIN: Final = 200 if FULL else 80
LOW: Final = 100 if FULL else 40
HIGH: Final = 5
HOLD: Final = 0.1
SETTINGS: Final = {**chaosapp.SETTINGS, "concurrency": 1, "prefetch": HIGH}
PRIORITY: Final = {"blocker": 10, "high": 7, "plain": 0, "low": -1}
BOUND: Final = chaosapp.SETTINGS["orphan_threshold"] + chaosapp.SETTINGS["recovery_interval"] + 2.0


def kind(tag: str) -> str:
    return tag.split("-")[0]


async def test_recovered_jobs_keep_their_place_ahead_of_lower_ones(
    topology_url: str, namespace: str, fleet: Fleet,
) -> None:
    url = topology_url
    topology = "cluster" if is_cluster_url(url) else "single"
    built = chaosapp.build(url, namespace, **SETTINGS)
    r = async_client(url)
    work = built.work
    try:
        await work.options(priority=10).enqueue("blocker-0", 600.0)
        await work.options(priority=7).enqueue_many(
            [((f"high-{i}", HOLD), {}) for i in range(HIGH)])
        a = _start(fleet, url, namespace, SETTINGS)
        if topology == "single":
            await wait_ready(r, namespace, [a])  # (a cluster's channels are per node)

        async def a_holds_them() -> bool:  # running the blocker, the highs fetched
            lists = [key async for key in r.scan_iter(match=f"{namespace}:*:in_progress:*")]
            held = sum([await r.llen(key) for key in lists])
            return held == HIGH + 1 and ("blocker-0", a.pid) in await chaosapp.runs(
                r, chaosapp.started_key(namespace))
        await wait_until(a_holds_them, timeout=READY_TIMEOUT * 2, every=0.05)
        await work.enqueue_many([((f"plain-{i}", HOLD), {}) for i in range(PLAIN)])
        await work.options(priority=-1).enqueue_many(
            [((f"low-{i}", HOLD), {}) for i in range(LOW)])
        a.signal(signal.SIGKILL)
        await a.wait_exit(timeout=10)
        b = _start(fleet, url, namespace, {**SETTINGS, "concurrency": 2, "prefetch": 0})

        async def all_done() -> bool:
            done = await chaosapp.counts(r, chaosapp.finished_key(namespace))
            return len(done) == HIGH + PLAIN + LOW  # every one but the blocker
        await wait_until(all_done, timeout=BOUND + (PLAIN + LOW) * HOLD + 60, every=0.1)
        started = await chaosapp.runs(r, chaosapp.started_key(namespace))
        finished = await chaosapp.counts(r, chaosapp.finished_key(namespace))
    finally:
        await r.aclose()
        await built.app.close()

    by_b = [tag for tag, pid in started if pid == b.pid and kind(tag) != "blocker"]
    highs = [i for i, tag in enumerate(by_b) if kind(tag) == "high"]
    after = len(by_b) - 1 - highs[-1] if highs else 0
    report(f"priority-crash-{topology}", plain=PLAIN, low=LOW, high=HIGH, started_by_b=len(by_b),
           lower_started_before_recovery=highs[0] if highs else None,
           lower_started_after=after)
    assert [tag for tag, pid in started if pid == a.pid] == ["blocker-0"]
    assert sorted(tag for tag in by_b if kind(tag) == "high") == [
        f"high-{i}" for i in range(HIGH)]
    assert highs == list(range(highs[0], highs[0] + HIGH)), by_b  # one block
    assert after > 0, "recovery came after every lower job: nothing was proven"
    rest = [PRIORITY[kind(tag)] for tag in by_b if kind(tag) != "high"]
    assert rest == sorted(rest, reverse=True), by_b
    assert [tag for tag, count in finished.items() if count > 1] == []


def _start(fleet: Fleet, url: str, namespace: str,
           settings: dict[str, object]) -> WorkerProcess:
    worker = WorkerProcess(url, namespace, settings, ["--log-level", "WARNING"],
                           target=chaosapp.TARGET)
    fleet.started.append(worker)
    return worker.start()
