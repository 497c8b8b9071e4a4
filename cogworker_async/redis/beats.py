"""BeatWriter: the heartbeat's own blocking connection and its writes.

The heartbeat runs on a thread, not the event loop, so that a job blocking the loop (CPU
work, a C call) never makes a live process look dead; it therefore has its own client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Final

from cogworker_async.redis.connection import connect_sync
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.scripts import source

ALIVE: Final = 1
ZOMBIE: Final = 2
"""Declared dead while paused: recovery took this process's jobs."""
FORGOTTEN: Final = 3
"""Its keys were gone (Redis lost them) without any recovery: re-registered, jobs kept."""


class BeatWriter:
    def __init__(self, url: str, keys: Keys, identity: str) -> None:
        self.client = connect_sync(url)
        self.keys = keys
        self.identity = identity
        self._beat = self.client.register_script(source("beat"))
        self._forget = self.client.register_script(source("forget"))

    def beat(self, info: Mapping[str, Any], ttl: float, *, first: bool) -> int:
        """Write one beat; returns ALIVE, ZOMBIE (declared dead) or FORGOTTEN."""
        keys = self.keys
        reply = self._beat(
            keys=[keys.process(self.identity), keys.last_beat, keys.in_progress_identities,
                  keys.beats, keys.declared_dead],
            args=[self.identity, json.dumps(info), int(ttl * 1000), repr(time.time()),
                  "0" if first else "1"],
        )
        return int(reply[0])

    def write_workers(self, running: Mapping[str, str]) -> None:
        """Replace the workers hash (what runs now; dashboard only, best effort)."""
        key = self.keys.workers(self.identity)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            if running:
                pipe.hset(key, mapping=dict(running))  # type: ignore[arg-type]
            pipe.execute()

    def retire(self) -> bool:
        """Clean stop: no longer alive; leave the registries if nothing is in progress."""
        keys = self.keys
        self.client.delete(keys.process(self.identity))
        reply = self._forget(
            keys=[keys.in_progress(self.identity), keys.in_progress_identities,
                  keys.last_beat, keys.beats, keys.workers(self.identity),
                  keys.process(self.identity), keys.declared_dead],
            args=[self.identity, "0"],
        )
        return int(reply) == 1

    def close(self) -> None:
        self.client.close()
