"""Flow control through Redis trouble and odd uses (found in review): a limiter's slot
whose release met a Redis restart comes back once Redis does, and an expired unique job
("until_started") frees its lock — a fresh enqueue of it is not refused for an hour."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import pytest

from cogworker_async import App
from cogworker_async.redis.limits import limiter_usage
from tests.servers import ServerProcess
from tests.waiting import wait_until

TIMEOUT = 20.0


async def _let_pass(seconds: float) -> None:
    deadline = time.time() + seconds

    def passed() -> bool:
        return time.time() > deadline
    await wait_until(passed, timeout=seconds + 5, every=0.02)


async def test_a_slot_whose_release_met_a_redis_blip_is_not_held_for_ever(
    namespace: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A concurrent slot released while Redis restarts (AOF: nothing lost) comes back
    once Redis does: its holder finished and its process lives on, so nobody else may
    free it (a release that met the outage is tried again by the worker)."""
    server = ServerProcess(appendonly=True).start()
    jobs = App(server.url, namespace=namespace, idle_fetch_interval=0.2,
               heartbeat_interval=0.5, orphan_threshold=20.0, recovery_interval=0.5,
               poll_interval=0.2)
    pay = jobs.limiter("pay", concurrent=1)
    inside, go = anyio.Event(), anyio.Event()
    probes: list[str] = []

    @jobs.job()
    async def hold() -> None:
        async with pay:
            inside.set()
            await go.wait()

    @jobs.job()
    async def probe() -> None:
        async with pay:
            probes.append("ran")

    caplog.set_level(logging.WARNING, logger="cogworker_async.limits.limiter")
    try:
        async with jobs.worker():
            first = await hold.enqueue()
            assert first is not None
            await wait_until(inside.is_set, timeout=TIMEOUT)
            server.stop()  # a blip: SIGTERM, AOF kept, back on the same port
            go.set()
            await wait_until(lambda: "couldn't release a slot" in caplog.text,
                             timeout=TIMEOUT)
            server.start()

            async def settled() -> bool:
                try:
                    return (await jobs.status(first)).state == "succeeded"
                except Exception:
                    return False
            await wait_until(settled, timeout=TIMEOUT, every=0.1)

            # The late release rides the worker's upkeep (every recovery_interval),
            # which may come just after the settlement: the slot is back within a bound.
            async def slot_free() -> bool:
                return (await limiter_usage(jobs._store()))["pay"].in_use == 0
            with anyio.move_on_after(8):
                await wait_until(slot_free, timeout=8, every=0.1)
            in_use = (await limiter_usage(jobs._store()))["pay"].in_use
            await probe.enqueue()
            with anyio.move_on_after(8):
                await wait_until(lambda: probes == ["ran"], timeout=8)
            assert (in_use, probes) == (0, ["ran"]), \
                f"finished holder's slot still held: in_use={in_use}, probe ran={probes}"
    finally:
        await jobs.close()
        server.cleanup()


async def test_an_expired_until_started_job_frees_its_unique_lock(
    make_app: Callable[..., App],
) -> None:
    """A unique job ("until_started") that expired never starts: its lock must go with
    it, or every enqueue of the same job is refused for ``unique_ttl`` (1 h)."""
    jobs = make_app()

    @jobs.job(unique="until_started")
    async def refresh() -> None:
        pass

    jid = await refresh.options(expires_in=0.2).enqueue()
    assert jid is not None
    await _let_pass(0.3)
    async with jobs.worker():
        async def dead() -> bool:
            return (await jobs.status(jid)).state == "dead"
        await wait_until(dead, timeout=TIMEOUT)
        again = await refresh.enqueue()
    assert again is not None, "the expired job's unique lock still refuses enqueues"
