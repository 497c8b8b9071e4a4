"""Network faults on real TCP links between worker processes and Redis (netlab.py).

1. ``lossy_link``: 5 % of the packets lost each way on the workers' link, and 20–50 ms
   added each way by a delaying proxy in front of Redis, under a flow of jobs through 3
   workers: none lost, none finished twice.
2. ``partitioned_worker``: one worker of three (each in its own namespace) cut off for
   longer than ``orphan_threshold`` while its jobs keep running: the others recover them
   and run them, and keep working; half of the cut-off copies finish during the cut, the
   rest are still running at the heal. On the heal the zombie fences itself (its log
   says so), cancels what still runs, and its late settlements change nothing: the
   recovered copies stay on their new owners' lists, nothing is filed, given back or
   lost. What ran twice is exactly what the zombie held when it was cut off (the window
   README.md documents for a process paused past ``orphan_threshold``).
3. ``lost_enqueue_reply``: an enqueuer (the public API, in its own namespace) whose
   request reaches Redis but whose reply is lost: the error reaches the caller within
   the client's socket timeout, and after the heal the job exists at most once.

The witness (netapp.py: a file) and the test's own link to Redis are never faulted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, cast

import anyio
import redis.asyncio

from cogworker_async.redis.connection import SOCKET_TIMEOUT
from cogworker_async.redis.keys import Keys
from tests.waiting import wait_until
from tests.worker.chaos.netns import netapp, netlab
from tests.worker.chaos.netns.conftest import (
    SETTINGS,
    NsWorker,
    StartWorker,
    identify,
    marks,
    report,
    size,
)
from tests.worker.chaos.netns.netlab import Lab, Lines, tell
from tests.worker.chaos.processes.conftest import beats, recoveries
from tests.worker.chaos.redisfaults.conftest import in_progress, leftovers, wait_alive, wait_ready
from tests.workerproc import ROOT

pytestmark = marks(short_timeout=90, full_timeout=900)

PROXY_PORT: Final = 6391
LATENCY_MS: Final = (20, 50)
LOSS_PERCENT: Final = 5
EXIT_SLACK: Final = 5.0
"""Seconds a stopping worker may take beyond its shutdown_timeout."""
READY_TIMEOUT: Final = 20.0
WITNESS_POLL: Final = 0.05
"""Seconds between reads of the witness file (thousands of lines at full size)."""
DECLARED_DEAD: Final = "was declared dead"
STALE: Final = "but was recovered by another process"
"""fencing.py's line for a finished job whose settlement had not reached Redis yet."""
CUT_FOR: Final = 2 * SETTINGS["orphan_threshold"]
"""Seconds the cut lasts at least: well past orphan_threshold."""


def tags_of(raws: list[bytes]) -> list[str]:
    return [str(json.loads(raw)["args"][0]) for raw in raws]


def by_tag(events: list[netapp.Event], kind: str) -> dict[str, list[int]]:
    """tag -> the pids that recorded a ``kind`` event for it, in order."""
    found: dict[str, list[int]] = {}
    for event in events:
        if event.e == kind:
            found.setdefault(event.tag, []).append(event.pid)
    return found


async def stop_all(*workers: NsWorker, slack: float = EXIT_SLACK) -> None:
    """SIGTERM each, then each must exit 0 within its shutdown_timeout + ``slack``."""
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        status = await worker.wait_exit(SETTINGS["shutdown_timeout"] + slack)
        assert status == 0, f"worker exited with {status}:\n{worker.log()}"


# -- 1. loss and latency ----------------------------------------------------------------

LOSSY_SETTINGS: Final = {"orphan_threshold": 10.0}
"""A lost packet costs a TCP retransmission (200 ms, doubling): a beat can be late by a
second or two. 10 s (the default is 20) keeps this scenario about loss, not deaths
(scenario 2 is about those).

STARTUP: the loss starts once the workers run. A worker's first beat (manager.py, before
the first fetch) is not retried, and with a 0.3 s heartbeat_interval its connection
gives up after 1 s (``max(1.0, heartbeat_interval)``), Linux's first SYN retransmission
time: one lost SYN or SYN-ACK — about one start in ten at 5 % loss — ends the worker
with exit 3."""


async def test_lossy_link_loses_no_job_and_finishes_none_twice(
    make_lab: Callable[..., Lab], control: Callable[[Lab], redis.asyncio.Redis],
    start_worker: StartWorker, namespace: str, witness_path: Path,
) -> None:
    total = size(300, 10_000)
    lab = make_lab(["wrk"])
    link = lab.link("wrk")
    ready = lab.dir / "proxy.ready"
    lab.spawn(lab.srv, [sys.executable, "-m", "tests.worker.chaos.netns.latency",
                        f"{link.srv_addr}:{PROXY_PORT}", f"127.0.0.1:{netlab.REDIS_PORT}",
                        *map(str, LATENCY_MS), str(ready)], cwd=ROOT, memory_bytes=1 << 30)
    await wait_until(ready.exists, timeout=READY_TIMEOUT)
    r = control(lab)
    url = f"redis://{link.srv_addr}:{PROXY_PORT}/0"
    workers = [start_worker(link.ns, url, "--concurrency", "20", **LOSSY_SETTINGS)
               for _ in range(3)]
    await wait_ready(r, namespace, *workers)
    # Once they run: a worker's first beat has no second chance (see STARTUP below).
    lab.lose(link, LOSS_PERCENT)
    jobs = netapp.build(lab.control_url, namespace)
    began = time.monotonic()
    try:
        batch = 100
        for first in range(0, total, batch):  # a flow, not one burst
            await jobs.record.enqueue_many(
                [((f"j{i}",), {}) for i in range(first, min(first + batch, total))])
    finally:
        await jobs.app.close()

    def all_finished() -> bool:
        for worker in workers:
            assert worker.alive(), f"worker exited with {worker.returncode}:\n{worker.log()}"
        return netapp.finishes(witness_path) >= total

    await wait_until(all_finished, timeout=size(60, 600), every=0.1)
    seconds = time.monotonic() - began
    counts = lab.counts(link)

    async def settled() -> bool:
        return not any((await leftovers(r, namespace)).values())

    await wait_until(settled, timeout=30)
    lab.heal(link)
    # A connection can still be backing off from its last lost segment: slack for it.
    await stop_all(*workers, slack=EXIT_SLACK + SOCKET_TIMEOUT)
    events = netapp.events(witness_path)
    finishes = Counter(event.tag for event in events if event.e == "finish")
    starts = Counter(event.tag for event in events if event.e == "start")
    report("lossy_link", jobs=total, workers=len(workers), seconds=round(seconds, 1),
           jobs_per_s=round(total / seconds), lost=total - len(finishes),
           finished_twice=sum(n > 1 for n in finishes.values()),
           started_twice=sum(n > 1 for n in starts.values()),
           recoveries=len(await recoveries(r, namespace)),
           packets={way: {"seen": c.seen, "dropped": c.dropped} for way, c in counts.items()})
    assert set(finishes) == {f"j{i}" for i in range(total)}  # none lost
    assert set(finishes.values()) == {1}  # none finished twice
    for way in ("to_peer", "to_srv"):
        assert counts[way].dropped > 0, way  # the loss was real


# -- 2. one worker partitioned ----------------------------------------------------------


async def _all_started_elsewhere(path: Path, tags: set[str], zombie: NsWorker) -> bool:
    started = by_tag(netapp.events(path), "start")
    return all(any(pid != zombie.pid for pid in started.get(tag, [])) for tag in tags)


async def test_partitioned_worker_is_recovered_and_fences_itself_on_heal(
    make_lab: Callable[..., Lab], control: Callable[[Lab], redis.asyncio.Redis],
    start_worker: StartWorker, namespace: str, witness_path: Path,
) -> None:
    held, flow = size(4, 10), size(100, 2000)
    lab = make_lab(["w0", "w1", "w2"])
    r = control(lab)
    keys = Keys(namespace)
    links = [lab.link(f"w{i}") for i in range(3)]
    zombie = start_worker(links[0].ns, links[0].redis_url, "--concurrency", str(held))
    await wait_ready(r, namespace, zombie)
    jobs = netapp.build(lab.control_url, namespace)
    try:
        # The zombie-to-be takes every held job: it is the only worker yet.
        held_tags = {f"held{i}" for i in range(held)}
        await jobs.hold.enqueue_many([((tag,), {}) for tag in sorted(held_tags)])
        await wait_alive(zombie, lambda: set(by_tag(netapp.events(witness_path), "start"))
                         >= held_tags, timeout=READY_TIMEOUT)
        others = [start_worker(link.ns, link.redis_url, "--concurrency", "20")
                  for link in links[1:]]
        await wait_ready(r, namespace, zombie, *others)
        await identify(r, namespace, zombie, *others)

        lab.partition(links[0])
        cut_at = time.monotonic()
        zombie_list = cast("list[bytes]", await r.lrange(
            keys.in_progress("default", zombie.identity), 0, -1))
        assert set(tags_of(zombie_list)) == held_tags
        # The others keep working meanwhile.
        await jobs.record.enqueue_many([((f"flow{i}",), {}) for i in range(flow)])
    finally:
        await jobs.app.close()

    await wait_until(lambda: _all_started_elsewhere(witness_path, held_tags, zombie),
                     timeout=SETTINGS["orphan_threshold"] + 15, every=WITNESS_POLL)
    recovered_in = time.monotonic() - cut_at
    flow_tags = {f"flow{i}" for i in range(flow)}
    await wait_until(lambda: set(by_tag(netapp.events(witness_path), "finish")) >= flow_tags,
                     timeout=size(30, 120), every=WITNESS_POLL)
    # Half of the zombie's copies finish during the cut: their acks are late.
    finishing = set(sorted(held_tags)[: held // 2])
    for tag in finishing:
        netapp.gate(witness_path, tag, zombie.pid).touch()
    await wait_until(lambda: {tag for tag, pids in by_tag(netapp.events(witness_path),
                                                          "finish").items()
                              if zombie.pid in pids} == finishing, timeout=10,
                     every=WITNESS_POLL)
    assert zombie.alive()
    await anyio.sleep(max(0.0, cut_at + CUT_FOR - time.monotonic()))  # the fault's length
    cut_for = time.monotonic() - cut_at

    lab.heal(links[0])
    healed_at = time.monotonic()
    await wait_until(lambda: DECLARED_DEAD in zombie.log(), timeout=30)
    fenced_in = time.monotonic() - healed_at

    async def zombie_idle() -> bool:
        return (await beats(r, namespace)).get(zombie.identity, {}).get("busy") == 0

    await wait_until(zombie_idle, timeout=10)
    await stop_all(zombie)  # its exit: its late settlements are all done
    jids = {tag: str(json.loads(raw)["jid"]) for tag, raw in zip(tags_of(zombie_list),
                                                                  zombie_list, strict=True)}
    # Recovery counted one orphaning per job; a late ack that reached Redis clears the
    # counter of the copy running elsewhere (ack.lua deletes it whatever LREM found).
    counters = {tag: int(await r.get(keys.orphanings("default", jid)) or 0)
                for tag, jid in jids.items()}

    # The recovered copies are still running on their new owners, still listed there:
    # the zombie's late acks took nothing off them, and it filed or gave back nothing.
    lists = await in_progress(r, namespace)
    listed = sorted(tag for raws in lists.values() for tag in tags_of(raws))
    assert keys.in_progress("default", zombie.identity) not in lists
    assert listed == sorted(held_tags)
    assert sorted(raw for raws in lists.values() for raw in raws) == sorted(zombie_list)
    during = await leftovers(r, namespace)
    for tag in held_tags:
        netapp.gate(witness_path, tag).touch()

    async def settled() -> bool:
        return not any((await leftovers(r, namespace)).values())

    await wait_until(settled, timeout=15)
    await stop_all(*others)

    events = netapp.events(witness_path)
    starts, finishes = by_tag(events, "start"), by_tag(events, "finish")
    run_twice = {tag for tag, pids in starts.items() if len(pids) > 1}
    finished_twice = {tag for tag, pids in finishes.items() if len(pids) > 1}
    found = [line for line in zombie.log().splitlines() if DECLARED_DEAD in line]
    events_seen = await recoveries(r, namespace)
    processed = int(await r.get(keys.stats_processed) or 0)
    report("partitioned_worker", held=held, flow=flow, cut_for_s=round(cut_for, 2),
           recovered_in_s=round(recovered_in, 2), fenced_in_s=round(fenced_in, 2),
           recovered=sum(e["requeued"] for e in events_seen
                         if e["identity"] == zombie.identity),
           run_twice=len(run_twice), finished_twice=len(finished_twice),
           lost=len((held_tags | flow_tags) - set(finishes)), fence_log=found,
           late_settlements_dropped_by_fence=zombie.log().count(STALE),
           stats_processed=processed, stats_failed=int(await r.get(keys.stats_failed) or 0),
           finishes=sum(len(pids) for pids in finishes.values()),
           late_acks_cleared_orphan_counter=sum(counters[tag] == 0 for tag in finishing),
           leftovers_during=during)
    assert [(e["identity"], e["requeued"]) for e in events_seen] == [
        (zombie.identity, held)]
    assert run_twice == held_tags  # exactly what it held when cut off
    assert finished_twice == finishing  # its finished copies; the rest were cancelled
    assert all(starts[tag][0] == zombie.pid for tag in held_tags)
    assert set(finishes) == held_tags | flow_tags  # lost: 0
    assert all(zombie.pid not in finishes[tag] for tag in flow_tags)
    assert len(found) == 1  # fenced once
    assert all(counters[tag] == 1 for tag in held_tags - finishing)
    # Every run counted once: each finish, and each copy the fence cancelled.
    assert processed == sum(map(len, finishes.values())) + held - len(finishing)
    assert f"{held - len(finishing)} running job(s) cancelled here" in zombie.log()
    assert during.pop("in_progress") == held
    assert not any(during.values())


# -- 3. a lost reply to an enqueue --------------------------------------------------------

ENQUEUE_SLACK: Final = 3.0
"""Seconds beyond SOCKET_TIMEOUT the error may take to reach the caller."""


async def _copies(r: redis.asyncio.Redis, namespace: str, tag: str) -> dict[str, int]:
    """Where jobs tagged ``tag`` are, by structure (queue, in-progress, sets)."""
    keys = Keys(namespace)
    found: Counter[str] = Counter()
    queued = cast("list[bytes]", await r.lrange(keys.queue("default"), 0, -1))
    found["queue"] = tags_of(queued).count(tag)
    for raws in (await in_progress(r, namespace)).values():
        found["in_progress"] += tags_of(raws).count(tag)
    for name in ("schedule", "retry", "dead"):
        for member in await r.zrange(getattr(keys, name)("default"), 0, -1):
            found[name] += tag in as_text(member)
    return {where: n for where, n in found.items() if n}


def as_text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


async def test_lost_enqueue_reply_raises_in_time_and_leaves_at_most_one_copy(
    make_lab: Callable[..., Lab], control: Callable[[Lab], redis.asyncio.Redis],
    namespace: str,
) -> None:
    lab = make_lab(["enq"])
    link = lab.link("enq")
    r = control(lab)
    enqueuer = lab.spawn(link.ns, [sys.executable, "-m", "tests.worker.chaos.netns.netapp",
                                   "enqueue", link.redis_url, namespace, "lost"],
                         cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         memory_bytes=1 << 30)
    lines = Lines(enqueuer)
    line = await anyio.to_thread.run_sync(lines.next, READY_TIMEOUT)
    assert line == "ready", line
    lab.fault(link, to_peer=netlab.drop_all)  # what Redis sends the enqueuer is lost
    tell(enqueuer, "go")
    line = await anyio.to_thread.run_sync(lines.next, SOCKET_TIMEOUT + ENQUEUE_SLACK + 5)
    assert line is not None, "the enqueue neither returned nor raised"
    outcome = json.loads(line)
    written_during = await _copies(r, namespace, "lost")
    counts = lab.counts(link)
    lab.heal(link)
    assert await anyio.to_thread.run_sync(enqueuer.wait, 10) == 0
    after = await _copies(r, namespace, "lost")
    report("lost_enqueue_reply", outcome=outcome, copies=sum(after.values()), where=after,
           replies_dropped=counts["to_peer"].dropped)
    assert "error" in outcome, outcome  # a lost reply is never taken for a success
    assert outcome["seconds"] <= SOCKET_TIMEOUT + ENQUEUE_SLACK
    assert counts["to_peer"].dropped > 0
    assert sum(after.values()) <= 1
    assert after == written_during  # nothing re-sent it once the link was back
