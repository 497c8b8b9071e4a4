"""limit_calls.py: a worker's limiter calls batched per limiter, on a real Redis.

What batching must keep: a concurrent limiter never admits more than N, whichever
calls share a script call; a caller that stops waiting while its take is in flight
leaves no slot held; a release lands before the takes of the round after it. What it
buys: calls made at about the same time go in one script call.
"""

from __future__ import annotations

import asyncio
from typing import cast

import anyio
import pytest

from cogworker_async.limits.calls import LimitCalls
from cogworker_async.limits.limiter import RUNNER, Limiter, Runner
from cogworker_async.redis.limits import LimitSpec, holder_member
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import Store
from tests.waiting import wait_until

ME = "host:1:abc"
NAME = "payments"


async def alive(store: Store) -> None:
    await store.client.set(store.keys.process(ME), "{}", px=60_000)


async def holders(store: Store) -> set[str]:
    found = await store.client.zrange(store.keys.limiter(NAME, "holders"), 0, -1)
    return {as_bytes(cast(bytes, m)).decode() for m in found}


async def evalsha_calls(store: Store) -> int:
    stats = await store.client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_fifty_takes_at_once_admit_exactly_n_in_a_few_script_calls(
    store: Store,
) -> None:
    await alive(store)
    calls = LimitCalls(store, set())
    spec = LimitSpec("concurrent", 5)
    members = [holder_member(ME, f"j{i}", "t", 60.0) for i in range(50)]
    before = await evalsha_calls(store)

    decisions = await asyncio.gather(*(calls.take(NAME, spec, m) for m in members))

    admitted = [m for m, d in zip(members, decisions, strict=True) if d.admitted]
    assert len(admitted) == 5
    assert await holders(store) == set(admitted)
    # The first call goes alone, the 49 made while it flew go together: 2, and a few
    # more if the server's other clients' calls are counted in between.
    assert await evalsha_calls(store) - before <= 5


async def test_window_takes_at_once_are_granted_as_far_as_the_window_has_room(
    store: Store,
) -> None:
    calls = LimitCalls(store, set())
    spec = LimitSpec("window", 7, 1_000_000.0)

    decisions = await asyncio.gather(*(calls.take(NAME, spec, None) for _ in range(20)))

    assert sum(d.admitted for d in decisions) == 7


async def test_releases_land_before_the_next_rounds_takes(store: Store) -> None:
    await alive(store)
    calls = LimitCalls(store, set())
    spec = LimitSpec("concurrent", 1)
    first, second = (holder_member(ME, j, "t", 60.0) for j in ("a", "b"))
    assert (await calls.take(NAME, spec, first)).admitted

    released = asyncio.ensure_future(calls.release(NAME, first))
    taken = asyncio.ensure_future(calls.take(NAME, spec, second))
    await asyncio.gather(released, taken)

    assert taken.result().admitted
    assert await holders(store) == {second}


async def test_a_take_whose_caller_left_before_its_round_is_not_sent(store: Store) -> None:
    await alive(store)
    calls = LimitCalls(store, set())
    spec = LimitSpec("concurrent", 5)
    going = holder_member(ME, "a", "t", 60.0)
    leaving = holder_member(ME, "b", "t", 60.0)

    first = asyncio.ensure_future(calls.take(NAME, spec, going))
    await asyncio.sleep(0)  # its round is in flight
    late = asyncio.ensure_future(calls.take(NAME, spec, leaving))
    await asyncio.sleep(0)
    late.cancel()  # before the next round picks it up
    await first
    after = holder_member(ME, "c", "t", 60.0)
    await calls.take(NAME, spec, after)  # a round after any that could have sent it

    assert await holders(store) == {going, after}


@pytest.mark.parametrize("yields", [0, 1, 2, 3, 5, 8])
async def test_a_job_cancelled_while_taking_a_slot_holds_none(store: Store,
                                                              yields: int) -> None:
    """Cancelled before its round, while its round is in flight or just after: its take
    is dropped, or lands and is given back."""
    await alive(store)
    runner = Runner(store, ME)
    running = RUNNER.set(runner)
    try:
        limiter = Limiter(NAME, LimitSpec("concurrent", 5), store=lambda: store)
        scopes: list[anyio.CancelScope] = []

        async def job() -> None:
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                async with limiter:
                    await anyio.sleep(30)

        task = asyncio.ensure_future(job())
        for _ in range(yields):
            await asyncio.sleep(0)
        await wait_until(lambda: bool(scopes), timeout=5)
        scopes[0].cancel()
        await asyncio.wait_for(task, 10)
    finally:
        RUNNER.reset(running)

    # A cancelled job does not wait for its release: it lands just after.
    await wait_until(runner.calls.idle, timeout=10)
    assert await holders(store) == set()
