"""Steadiness: may this process judge others dead in a slot yet? Pure; fed by the heartbeat.

Recovery judges a process dead by the age of its last stamp in a slot. Stamps there are
only worth reading once every live process has had the time to write a fresh one: after
Redis (or that shard) was away, every stamp is stale, and the first process to run
recovery would take the live ones for dead and requeue their running jobs, to run twice.
The only outage a process can see is its own: so it judges in a slot only after its own
beats there have succeeded *without a break* for ``orphan_threshold``.

A break is a failed beat, or two successes further apart than ``gap`` — the process (or
the machine it shares with Redis) was frozen, or its beats could not be sent; either way
the others may not have been able to beat either. A process that just started has no
unbroken run yet: it judges nobody for ``orphan_threshold`` after its first beat (it
cannot tell whether Redis just came back from an outage it did not see). Pinned by
tests/worker/units/test_steadiness.py and tests/redis/cluster/test_shard_away.py.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class Steadiness:
    """Per slot (a hashable name: a queue, or None for the namespace's), since when this
    process's beats there have succeeded without a break. Times are ``time.monotonic()``."""

    def __init__(self, gap: float) -> None:
        self.gap = gap
        """Longest time between two successes of one unbroken run (seconds)."""
        self._since: dict[Hashable, float] = {}
        self._last: dict[Hashable, float] = {}

    def succeeded(self, slot: Hashable, now: float) -> None:
        last = self._last.get(slot)
        if last is None or now - last > self.gap:
            self._since[slot] = now  # a new run begins
        self._last[slot] = now

    def failed(self, slot: Hashable) -> None:
        self._since.pop(slot, None)
        self._last.pop(slot, None)

    def steady(self, slot: Hashable, seconds: float, now: float) -> bool:
        """Beats in ``slot`` have succeeded without a break for ``seconds``, up to now."""
        since, last = self._since.get(slot), self._last.get(slot)
        if since is None or last is None:
            return False
        return now - since >= seconds and now - last <= self.gap

    def all_steady(self, slots: Iterable[Hashable], seconds: float, now: float) -> bool:
        return all(self.steady(slot, seconds, now) for slot in slots)
