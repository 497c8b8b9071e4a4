"""Waiting on a condition with a bound: no sleeps for luck."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio


async def wait_until(
    condition: Callable[[], bool | Awaitable[bool]], *, timeout: float = 10.0, every: float = 0.01
) -> None:
    """Return once ``condition()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await anyio.sleep(every)
