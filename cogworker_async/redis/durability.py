"""Durable writes, when asked: an enqueue or a settle confirmed beyond the master's memory.

Redis replicates asynchronously and fsyncs its append-only file once a second (at best):
a master that dies can take with it writes it already acknowledged — an enqueue (the
job is lost), or an ack (the job runs again) — and Sentinel promotes a replica that
never saw them. With ``durability="replica"`` the write is followed, on the same
connection and in the same round trip, by ``WAIT <replicas> <timeout>``: the call
returns only once that many replicas hold it (``durability_replicas``, 1 by default).
One is not enough against a partition: a master cut off with one replica keeps
confirming writes to it while Sentinel promotes another replica that never saw them
(measured: tests/worker/chaos/netns/test_replica_durability.py); waiting for every
replica closes that case, at the price of failing every write while one is away.
With ``"aof"``, by ``WAITAOF 1 0 <timeout>``: once the master's append-only file holds
it on disk (Redis >= 7.2 and Valkey; the server needs ``appendonly yes``).

When the confirmation does not come in time the call fails with ``NotDurable`` rather
than pretend: an enqueue raises it to the caller, a settle stays pending and is tried
again (every settle script is idempotent). The write itself did run on the master: the
job may exist — like a lost reply, ``NotDurable`` is a ``ConnectionError`` to redis-py's
error tree, and the worker treats it as a call that may have run.

What it does not cover: a fetch (a fetch lost in a failover puts the job back on its
queue while the worker runs it: it can run twice, never be lost), and writes of the
upkeep (beats, recovery, the poller), which are made again by their next round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import redis

Mode = Literal["replica", "aof"]

MODES: Final = ("replica", "aof")

DEFAULT_TIMEOUT: Final = 1.0
"""Seconds an enqueue or a settle waits for its confirmation before it fails."""


class NotDurable(redis.exceptions.ConnectionError):
    """A write ran on the master, but no replica (``"replica"``) or no fsync
    (``"aof"``) confirmed it within the durability timeout: it may be lost if the master
    fails now, or it may last. An enqueue that raises this may have pushed its job."""


@dataclass(frozen=True, slots=True)
class Durability:
    """What each enqueue and settle waits for, and for how long."""

    mode: Mode
    timeout: float = DEFAULT_TIMEOUT
    replicas: int = 1
    """Replicas ``WAIT`` asks for (``"replica"`` only)."""

    @property
    def command(self) -> tuple[Any, ...]:
        """The command sent right after the write, on its connection."""
        ms = max(1, round(self.timeout * 1000))
        return ((b"WAIT", self.replicas, ms) if self.mode == "replica"
                else (b"WAITAOF", 1, 0, ms))

    @property
    def probe(self) -> tuple[Any, ...] | None:
        """A command that fails where this durability cannot work (``WAITAOF`` on a
        server without it, or without ``appendonly``), writing nothing; None: none
        needed (every server has ``WAIT``)."""
        return (b"WAITAOF", 1, 0, 1) if self.mode == "aof" else None

    def unusable(self, refusal: Exception) -> str:
        """Why this durability cannot work on the server that refused ``probe``."""
        if "unknown command" in str(refusal).lower():
            return ("durability='aof' needs WAITAOF, which this server does not have "
                    "(Redis >= 7.2 or Valkey): use durability='replica', or upgrade")
        return (f"durability={self.mode!r} cannot work on this server ({refusal}): "
                "turn its append-only file on (appendonly yes)")

    def check(self, reply: Any) -> None:
        """Raise ``NotDurable`` unless ``reply`` (``WAIT``'s or ``WAITAOF``'s) confirms
        the write."""
        if isinstance(reply, redis.exceptions.ResponseError):
            if self.mode == "aof" and "unknown command" in str(reply).lower():
                raise NotDurable(
                    "durability='aof' needs WAITAOF, which this server does not have "
                    "(Redis >= 7.2 or Valkey): use durability='replica', or upgrade")
            raise NotDurable(f"durability={self.mode!r}: the server refused "
                             f"{self.command[0].decode()} ({reply})")
        confirmed = _count(reply)
        wanted = self.replicas if self.mode == "replica" else 1
        if confirmed < wanted:
            what = (("no replica acknowledged it" if confirmed == 0
                     else f"{confirmed} of the {wanted} replicas wanted acknowledged it")
                    if self.mode == "replica" else "the server did not fsync it")
            raise NotDurable(
                f"written on the master, but {what} within {self.timeout:g}s "
                f"(durability={self.mode!r}): it may be lost if the master fails now")


def _count(reply: Any) -> int:
    """WAIT's reply is the number of replicas; WAITAOF's is [local fsyncs, replicas]."""
    if isinstance(reply, Sequence) and not isinstance(reply, bytes | str):
        return int(reply[0]) if reply else 0
    return int(reply)
