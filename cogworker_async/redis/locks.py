"""Locks: the short-lived owner locks — a unique job's, a running job's, the periodic
scheduler's — and the periodic ticks claimed. Each lock is a key holding its owner, with
a TTL; only the owner releases or extends it (``lua/take_lock.lua``, ``release_lock``,
``extend_lock``).
"""

from __future__ import annotations

from cogworker_async.redis.part import Part, as_bytes


class Locks(Part):
    async def take_lock(self, key: str, owner: str, ttl: float) -> bool:
        return int(await self.scripts.run("take_lock", [key], [owner, int(ttl * 1000)])) == 1

    async def lock_holder(self, key: str) -> str | None:
        """The owner holding ``key``'s lock, None when it is free."""
        held = await self.client.get(key)
        return None if held is None else as_bytes(held).decode("utf-8", "replace")

    async def release_lock(self, key: str, owner: str) -> bool:
        return int(await self.scripts.run("release_lock", [key], [owner])) == 1

    async def extend_lock(self, key: str, owner: str, ttl: float) -> bool:
        ms = max(1, int(ttl * 1000))
        return int(await self.scripts.run("extend_lock", [key], [owner, ms])) == 1

    async def cron_claimed(self, queue: str) -> dict[str, float]:
        """periodic name -> last claimed tick, for the periodic jobs of ``queue``
        (unreadable stamps are left out)."""
        claimed = {}
        for name, value in (await self.client.hgetall(self.keys.cron_claimed(queue))).items():
            try:
                claimed[as_bytes(name).decode()] = float(value)
            except ValueError:
                continue
        return claimed

