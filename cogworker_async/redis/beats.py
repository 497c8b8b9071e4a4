"""BeatWriter: the heartbeat's own blocking connection and its writes.

The heartbeat runs on a thread, not the event loop, so that a job blocking the loop (CPU
work, a C call) never makes a live process look dead; it therefore has its own client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import redis

from cogworker_async.errors import ConfigurationError
from cogworker_async.redis.connection import SOCKET_TIMEOUT, connect_sync
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.scripts import SyncScript

ALIVE: Final = 1
ZOMBIE: Final = 2
"""Declared dead while paused: recovery took this process's jobs."""
FORGOTTEN: Final = 3
"""Its keys were gone (Redis lost them) without any recovery: re-registered, jobs kept."""



def _named(exc: Exception, script_keys: Sequence[str]) -> Exception:
    """A beat refused for a key of another type (a co-tenant's, a hand's SET) as an error
    that names the keys to look at: a process that cannot beat must not run jobs (the
    others would take it for dead and run them again), and a bare WRONGTYPE says not
    which key to delete."""
    if isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("WRONGTYPE"):
        return ConfigurationError(
            "cannot write this process's beat: one of these keys holds another type than "
            f"cogworker writes there (not written by it: delete it): {', '.join(script_keys)}")
    return exc

class BeatWriter:
    def __init__(self, url: str, keys: Keys, identity: str, queues: Sequence[str], *,
                 timeout: float = SOCKET_TIMEOUT) -> None:
        self._url = url
        self._timeout = timeout
        self._client: redis.Redis | None = None
        self.keys = keys
        self.identity = identity
        self.queues = list(dict.fromkeys(queues))
        self._beat = SyncScript.named("beat")
        self._forget = SyncScript.named("forget")
        self._pool: ThreadPoolExecutor | None = None
        self.forgotten: frozenset[str | None] = frozenset()
        """The slots whose keys the last beat found lost (a queue; None: the namespace's)."""
        self.failure: Exception | None = None
        """What failed in the last beat (a slot's node away), or None."""
        self.failed: frozenset[str | None] = frozenset()
        """The slots whose beat failed in the last round (a queue; None: the
        namespace's); empty, with ``succeeded``, when it failed before any slot was
        tried (no client)."""
        self.succeeded: frozenset[str | None] = frozenset()
        """The slots whose beat succeeded in the last round."""

    @property
    def timeout(self) -> float:
        """Seconds a beat waits for each slot's reply."""
        return self._timeout

    @property
    def client(self) -> redis.Redis:
        """Made on first use: a cluster client connects as it is made, and a worker must
        start (and wait for Redis) without one."""
        if self._client is None:
            self._client = connect_sync(self._url, timeout=self._timeout)
        return self._client

    def beat(self, info: Mapping[str, Any], ttl: float, *, first: bool) -> int:
        """Write one beat in the namespace's slot and in each queue's; returns ZOMBIE if
        any slot says it was declared dead, else FORGOTTEN if any had lost its keys
        (which: ``forgotten``, also set with ZOMBIE), else ALIVE; raises what failed,
        unless there was news (then it is left in ``failure`` for the caller to raise
        once the news is passed on).

        The slots are beaten at once, each on its own thread: a node that hangs (a
        frozen host) must not hold up the beats of the others until their markers
        expire and the live process looks dead there. Every slot is beaten even when
        one fails."""
        keys, identity = self.keys, self.identity
        self.failed = self.succeeded = frozenset()
        stamp, again = repr(time.time()), "0" if first else "1"
        ms = int(ttl * 1000)
        beats: list[tuple[str | None, list[str], str]] = [
            (queue, [keys.queue_process(queue, identity), keys.queue_last_beat(queue),
                     keys.queue_identities(queue), keys.queue_declared_dead(queue)], "1")
            for queue in self.queues]
        beats.append((None, [keys.process(identity), keys.last_beat, keys.processes,
                             keys.declared_dead, keys.beats], json.dumps(info)))
        client = self.client
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(beats), thread_name_prefix="cogworker-beat")
        futures = [(slot, script_keys, self._pool.submit(
                        self._beat.run, client, script_keys, [identity, value, ms, stamp, again]))
                   for slot, script_keys, value in beats]
        found: dict[str | None, int] = {}
        self.failure = None
        failed = set()
        for slot, script_keys, future in futures:
            try:
                found[slot] = int(future.result()[0])
            except Exception as exc:
                self.failure = self.failure or _named(exc, script_keys)
                failed.add(slot)
        self.failed = frozenset(failed)
        self.succeeded = frozenset(found)
        self.forgotten = frozenset(slot for slot, status in found.items() if status == FORGOTTEN)
        # News from one slot must not wait for another: a slot that lost its keys was
        # re-registered by this beat, and the next round would say ALIVE there.
        if ZOMBIE in found.values():
            return ZOMBIE
        if self.forgotten:
            return FORGOTTEN
        if self.failure is not None:
            raise self.failure
        return ALIVE

    def write_workers(self, running: Mapping[str, str]) -> None:
        """Replace the workers hash (what runs now; dashboard only, best effort)."""
        key = self.keys.workers(self.identity)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            if running:
                pipe.hset(key, mapping=dict(running))  # type: ignore[arg-type]
            pipe.execute()

    def retire(self) -> bool:
        """Clean stop: no longer alive; leave the registries of every slot where nothing
        is in progress. True if it left them all."""
        keys, identity = self.keys, self.identity
        forgotten = True
        for queue in self.queues:
            self.client.delete(keys.queue_process(queue, identity))
            forgotten &= int(self._forget.run(
                self.client,
                [keys.in_progress(queue, identity), keys.queue_identities(queue),
                 keys.queue_last_beat(queue), keys.queue_process(queue, identity),
                 keys.queue_declared_dead(queue)],
                [identity, "0"])) == 1
        self.client.delete(keys.process(identity))
        if forgotten:
            self._forget.run(
                self.client,
                [keys.no_list(identity), keys.processes, keys.last_beat,
                 keys.process(identity), keys.declared_dead, keys.beats, keys.workers(identity)],
                [identity, "0"])
        return forgotten

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        if self._client is not None:
            self._client.close()
