"""Limits: the App's rate limiters as the dashboard's Limits tab and ``cogworker-async
limits`` show them — kind, capacity, how much is taken now, and recent refusals.

Read-only, from the registry each worker writes at start (``redis/limits.py``): a
limiter appears once a worker of the App has run. A concurrent limiter's holders whose
process is gone are not counted (the next acquisition that needs their slot frees it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cogworker_async.redis.limits import LimiterUsage, limiter_usage

if TYPE_CHECKING:
    from cogworker_async.admin.base import InspectorView


def capacity_text(usage: LimiterUsage) -> str:
    """What a limiter allows, in words: "5 at once", "100 per 60 s", "10 per 1 s (bucket)"."""
    if usage.kind == "concurrent" or usage.seconds is None:
        return f"{usage.capacity:,} at once"
    per = f"{usage.capacity:,} per {usage.seconds:g} s"
    return per if usage.kind == "window" else f"{per} (bucket)"


class Limits:
    """Every registered limiter's usage, by name."""

    def __init__(self, inspector: InspectorView) -> None:
        self._inspector = inspector

    async def all(self) -> list[LimiterUsage]:
        found = await limiter_usage(self._inspector.admin().store)
        return [found[name] for name in sorted(found)]
