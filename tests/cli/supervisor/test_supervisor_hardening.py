"""``run --processes`` against what a hostile probe found (issue 25), on real processes
and a real Redis: a job that exits its process with status 2 is a crash, not a child
that could not start; Redis refusing or unreachable ends the supervisor with 3, also on a
SIGINT after failures; a ``--metrics-port`` range past 65535 is refused up front.
``--max-memory`` has its own module (test_supervisor_max_memory.py): its two jobs each
crash a process twice (~20 s each), so xdist runs them beside these."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from typing import Any, Final, cast

import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from tests.cli.supervisor import fleetapp
from tests.cli.supervisor.test_supervisor import START, Supervised
from tests.cli.supervisor.test_supervisor import r as r
from tests.servers import ServerProcess, free_port
from tests.waiting import wait_until
from tests.worker.chaos.processes import chaosapp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SETTINGS: Final = {**chaosapp.SETTINGS, "max_orphanings": 1}
"""One recovery, then dead: each crash is a process start on a busy machine."""
BURIAL: Final = 100.0
"""Seconds for a job to crash its process twice and be buried (starts, backoffs,
orphan thresholds, memory reads; generous for a loaded 2-core machine)."""


@pytest.fixture
def fleet(redis_url: str, namespace: str) -> Iterator[Any]:
    started: list[Supervised] = []

    def start(*args: str, url: str = redis_url, **settings: Any) -> Supervised:
        sup = Supervised(url, namespace, {**SETTINGS, **settings},
                         ["--log-level", "INFO", *args], target=fleetapp.TARGET)
        sup.seen = set()
        started.append(sup)
        return cast(Supervised, sup.start())

    yield start
    for sup in started:
        if sup.process is not None and sup.returncode is None:
            print(sup.log()[-4000:])
        sup.cleanup()


@pytest.fixture
async def app(redis_url: str, namespace: str) -> Any:
    built = fleetapp.build(redis_url, namespace, **SETTINGS)
    yield built
    await built.close()


async def _dead(r: redis.asyncio.Redis, namespace: str, jid: str) -> dict[str, Any] | None:
    for member in cast("list[bytes]", await r.zrange(Keys(namespace).dead("default"), 0, -1)):
        entry = json.loads(member)
        if entry.get("jid") == jid:
            return dict(entry)
    return None


async def _buried_while_it_ran(r: redis.asyncio.Redis, namespace: str, jid: str,
                               sup: Supervised) -> dict[str, Any]:
    """The job's dead entry, once there; fails at once if the supervisor exits."""
    async def settled() -> bool:
        return not sup.alive() or await _dead(r, namespace, jid) is not None
    await wait_until(settled, timeout=BURIAL, every=0.2)
    assert sup.alive(), sup.log()[-3000:]
    entry = await _dead(r, namespace, jid)
    assert entry is not None
    return entry


async def test_a_job_that_exits_its_process_with_2_is_a_crash_not_a_failed_start(
    fleet: Any, app: Any, r: redis.asyncio.Redis, namespace: str,
) -> None:
    """Exit 2 from a young child was taken for 'could not start': the supervisor stopped
    every worker and exited 2, and the recovered job did it again after a restart. A
    child that had started is restarted; the job dies as a poison job does."""
    sup = fleet("--processes", "1")
    jid = await app.enqueue("exit2", "bye")
    entry = await _buried_while_it_ran(r, namespace, jid, sup)
    assert entry["error_class"] == "ProcessDied"
    assert (await chaosapp.counts(r, chaosapp.started_key(namespace)))["bye"] == 2
    assert "died (exit 2)" in sup.log()
    assert "could not start" not in sup.log()
    sup.signal(signal.SIGTERM)
    assert await sup.wait_exit(30) == 0


async def test_a_wrong_password_ends_the_supervisor_with_3(
    fleet: Any, redis_url: str,
) -> None:
    """Children refused by Redis were restarted forever: README promises exit 3."""
    bad = redis_url.replace("redis://", "redis://nobody:wrong@")
    sup = fleet("--processes", "2", url=bad)
    assert await sup.wait_exit(START) == 3, sup.log()[-3000:]
    assert "could not start (exit 3): stopping" in sup.log()
    assert sup.log().count("started (slot") <= 2  # never started again


async def test_an_unreachable_redis_ends_the_supervisor_with_3(fleet: Any) -> None:
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    sup = fleet("--processes", "2", "--wait-for-redis", "0.5", url=nobody)
    assert await sup.wait_exit(START) == 3, sup.log()[-3000:]
    assert sup.log().count("started (slot") <= 2


async def test_sigint_after_failures_does_not_report_a_clean_stop(
    fleet: Any, namespace: str,
) -> None:
    """A fleet that was up, whose worker cannot reach Redis any more as it restarts: a
    SIGINT reported 0 (the restarted child, stopped while it waited for Redis, exits 0).
    The slot's failure stands: exit 3."""
    server = ServerProcess().start()
    try:
        sup = fleet("--processes", "1", "--wait-for-redis", "0.5", url=server.url)
        built = fleetapp.build(server.url, namespace, **SETTINGS)
        client = redis.asyncio.Redis.from_url(server.url)
        try:
            await built.enqueue("work", "up", 0.0)

            async def worked() -> bool:
                return (await chaosapp.counts(client, chaosapp.finished_key(namespace))
                        )["up"] == 1
            await wait_until(worked, timeout=START, every=0.1)
        finally:
            await client.aclose()
            await built.close()
        (child,) = sup.children()
        server.stop()
        os.kill(child, signal.SIGKILL)
        await wait_until(lambda: "died (exit 3)" in sup.log() or not sup.alive(),
                         timeout=START, every=0.1)
        starts = sup.log().count("started (slot")
        await wait_until(lambda: sup.log().count("started (slot") > starts
                         or not sup.alive(), timeout=START, every=0.05)
        assert sup.alive(), sup.log()[-3000:]  # the fleet was up: an outage, not a start
        sup.signal(signal.SIGINT)
        assert await sup.wait_exit(30) == 3, sup.log()[-3000:]
    finally:
        server.cleanup()


async def test_a_metrics_port_range_past_65535_is_refused_before_any_child_starts(
    fleet: Any,
) -> None:
    """Worker i serves on PORT + i: the last one's port failed only after the others had
    started; now the whole range is checked at the call, a usage error naming it."""
    sup = fleet("--processes", "3", "--metrics-port", "65534")
    assert await sup.wait_exit(START) == 2
    assert "--metrics-port 65534" in sup.log()
    assert "started (slot" not in sup.log()
