"""ClusterClient: Redis Cluster through plain per-node clients, routed by hash slot.

Why not redis-py's ``redis.asyncio.RedisCluster``: in redis-py 7 and 8 it fails under
concurrent use — with twenty tasks pushing to one key, some calls fail with "Connection
closed by server" or ``'NoneType' object has no attribute 'writelines'`` (measured with
7.1.0 and 8.1.0; 6.4.0 was clean; tests/redis/cluster/test_client.py runs that load here). A
worker runs many jobs at once, so that is every worker. The standalone async client has
none of this, and the cluster protocol a job queue needs is small:

- **routing**: a command goes to the primary that serves its first key's slot (the slot
  map comes from ``CLUSTER SLOTS``); a command without a key goes to any primary;
- **MOVED**: the slot lives elsewhere now (a reshard, a failover) — the command did not
  run; the map is corrected and the command sent where the slot is;
- **ASK**: the slot is being migrated and this key has gone — the command did not run;
  it is sent once to the target, preceded by ``ASKING`` on the same connection;
- **TRYAGAIN**: a multi-key command during a migration, with its keys split between two
  nodes — it did not run; tried again shortly, a bounded number of times;
- a **lost connection** or ``CLUSTERDOWN``: raised as it is (no blind retry: the command
  may have run) and the slot map re-read before the next command.

The hot path (scripts) uses a ``Lane`` per node (``ClusterLane``): one connection per
call, the same redirect rules.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

import redis
import redis.asyncio
from redis.asyncio.client import Pipeline, PubSub
from redis.crc import key_slot

from cogworker_async.redis.lane import Lane

log = logging.getLogger(__name__)

SLOTS: Final = 16384
MAX_REDIRECTS: Final = 16
"""MOVED and ASK replies followed for one command before giving up."""
TRYAGAIN_FOR: Final = 10.0
"""Seconds a command refused with TRYAGAIN (a migrating slot) is tried again for: a
multi-key script whose keys are split between the two nodes waits for the slot's move
to finish (one slot of a few thousand keys moves in well under a second)."""
TRYAGAIN_PAUSE: Final = (0.01, 0.5)
"""First and longest pause between TRYAGAIN tries (doubling)."""

KEYLESS: Final = frozenset({
    "INFO", "CONFIG", "CONFIG GET", "TIME", "PING", "PUBLISH", "SCRIPT", "SCRIPT LOAD",
    "PUBSUB", "PUBSUB NUMSUB", "CLIENT", "COMMAND", "ECHO", "DBSIZE", "CLUSTER", "ACL",
    "MEMORY STATS", "LASTSAVE", "ROLE", "WAIT", "READONLY", "READWRITE", "FLUSHALL",
})
"""Commands that name no key: any primary answers (PUBLISH reaches every node)."""

Node = tuple[str, int]
T = TypeVar("T")


class Redirect(Exception):
    """A reply that says the command did not run here (MOVED, ASK, TRYAGAIN)."""

    def __init__(self, kind: str, slot: int, node: Node | None) -> None:
        super().__init__(f"{kind} {slot} {node}")
        self.kind, self.slot, self.node = kind, slot, node


def redirect_of(exc: BaseException) -> Redirect | None:
    """The redirect an error reply names, or None. redis-py's parser raises MovedError,
    AskError and TryAgainError (with the reply's first word removed); an error reply
    read some other way keeps its words, and is read from them."""
    if isinstance(exc, redis.exceptions.MovedError | redis.exceptions.AskError):
        kind = "MOVED" if isinstance(exc, redis.exceptions.MovedError) else "ASK"
        return Redirect(kind, int(exc.slot_id), (str(exc.host).strip("[]"), int(exc.port)))
    if isinstance(exc, redis.exceptions.TryAgainError):
        return Redirect("TRYAGAIN", -1, None)
    if not isinstance(exc, redis.exceptions.ResponseError):
        return None
    words = str(exc).split()
    if not words:
        return None
    kind = words[0].upper()
    if kind in ("MOVED", "ASK") and len(words) >= 3:
        host, _, port = words[2].rpartition(":")
        return Redirect(kind, int(words[1]), (host.strip("[]"), int(port)))
    if kind == "TRYAGAIN":
        return Redirect(kind, -1, None)
    return None


def command_key(args: Sequence[Any]) -> Any | None:
    """The key that decides where ``args`` runs, or None for a command without one."""
    name = _name(args[0])
    if name in ("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO"):
        return args[3] if len(args) > 3 and int(args[2]) > 0 else None
    if name in KEYLESS or name.split(" ")[0] in KEYLESS or len(args) < 2:
        return None
    return args[1]


def _name(value: Any) -> str:
    return (value.decode() if isinstance(value, bytes) else str(value)).upper()


class ClusterClient(redis.asyncio.Redis):
    """A Redis Cluster as one async client: every command of ``redis.asyncio.Redis``
    (they all come through ``execute_command``), pipelines split per node, SCAN over
    every primary, pub/sub on one node (a cluster's PUBLISH reaches every node)."""

    def __init__(self, seeds: Sequence[Node], **connection: Any) -> None:
        # The parent's pool is never used: every command goes through a node's client.
        super().__init__(host=seeds[0][0], port=seeds[0][1], **connection)
        self.seeds = list(seeds)
        self._connection = connection
        self._nodes: dict[Node, redis.asyncio.Redis] = {}
        self._lanes: dict[Node, Lane] = {}
        self._slots: list[Node | None] = [None] * SLOTS
        self._stale = True
        self._refreshing: asyncio.Lock | None = None

    # -- the slot map ------------------------------------------------------------------

    def node(self, address: Node) -> redis.asyncio.Redis:
        """The plain client of one node (made on first use, kept)."""
        found = self._nodes.get(address)
        if found is None:
            found = self._nodes[address] = redis.asyncio.Redis(
                host=address[0], port=address[1], **self._connection)
        return found

    def lane(self, address: Node) -> Lane:
        found = self._lanes.get(address)
        if found is None:
            found = self._lanes[address] = Lane(self.node(address))
        return found

    def mark_stale(self) -> None:
        """Read the slot map again before the next command (a node failed a caller)."""
        self._stale = True

    def get_primaries(self) -> list[Node]:
        """The primaries serving slots, as last read."""
        return sorted({node for node in self._slots if node is not None})

    async def initialize(self) -> ClusterClient:
        """Read the slot map now if it is stale (first use, or after a failure)."""
        if self._stale:
            await self.refresh()
        return self

    async def refresh(self) -> None:
        """Read the slot map (``CLUSTER SLOTS``) from the first node that answers: the
        known primaries first, then the seeds."""
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        async with self._refreshing:
            if not self._stale:
                return  # another caller just did
            candidates = list(dict.fromkeys([*self.get_primaries(), *self.seeds]))
            failure: Exception | None = None
            for address in candidates:
                try:
                    reply = await self.node(address).execute_command(  # type: ignore[no-untyped-call]
                        "CLUSTER SLOTS")
                except (redis.exceptions.RedisError, OSError) as exc:
                    failure = exc
                    continue
                self._apply(reply, address)
                self._stale = False
                return
            raise redis.exceptions.ConnectionError(
                f"no node of the Redis Cluster answered (tried {len(candidates)}): {failure}")

    def _apply(self, reply: Any, asked: Node) -> None:
        slots: list[Node | None] = [None] * SLOTS
        for entry in reply:
            start, end, primary = int(entry[0]), int(entry[1]), entry[2]
            host = primary[0].decode() if isinstance(primary[0], bytes) else str(primary[0])
            # A node may report its own address as "" (no announced IP): the one asked.
            address = (host or asked[0], int(primary[1]))
            for slot in range(start, end + 1):
                slots[slot] = address
        self._slots = slots

    async def _where(self, key: Any) -> Node:
        await self.initialize()
        if key is None:
            primaries = self.get_primaries()
            if not primaries:
                raise redis.exceptions.ClusterDownError("the Redis Cluster serves no slot")
            return random.choice(primaries)
        encoded = key if isinstance(key, bytes) else str(key).encode()
        found = self._slots[key_slot(encoded)]
        if found is None:
            self._stale = True
            raise redis.exceptions.ClusterDownError(
                f"no node serves the slot of {encoded!r} (the cluster is down or resharding)")
        return found

    # -- sending, with the redirect rules ---------------------------------------------

    async def routed(self, key: Any, send: Callable[[Node, bool], Awaitable[T]], *,
                     can_ask: bool = True) -> T:
        """``send(node, asking)`` to the node that serves ``key``, following MOVED, ASK
        and TRYAGAIN (the command did not run); anything else is raised as it is.
        ``can_ask=False`` (a MULTI: ASKING covers one command) waits out an ASK as a
        TRYAGAIN, at the slot's owner."""
        address = await self._where(key)
        asking = False
        redirects = 0
        loop = asyncio.get_running_loop()
        waited_until = loop.time() + TRYAGAIN_FOR
        pause = TRYAGAIN_PAUSE[0]
        while True:
            try:
                return await send(address, asking)
            except redis.exceptions.ResponseError as exc:
                found = redirect_of(exc)
                if found is not None and found.kind == "ASK" and not can_ask:
                    found = Redirect("TRYAGAIN", found.slot, None)
                waiting = found is not None and found.kind == "TRYAGAIN"
                if found is None or (waiting and loop.time() >= waited_until) or \
                        (not waiting and redirects >= MAX_REDIRECTS):
                    if isinstance(exc, redis.exceptions.ClusterDownError) or \
                            str(exc).startswith("CLUSTERDOWN"):
                        self._stale = True
                    raise
                asking = False
                if found.kind == "MOVED" and found.node is not None:
                    redirects += 1
                    self._slots[found.slot] = found.node
                    self._stale = True  # a move seldom comes alone: re-read the map
                    address = found.node
                elif found.kind == "ASK" and found.node is not None:
                    # An ASK after a TRYAGAIN is the same migration going on: bounded by
                    # the TRYAGAIN deadline, not counted as one more redirect.
                    redirects += 0 if pause > TRYAGAIN_PAUSE[0] else 1
                    address, asking = found.node, True
                else:  # TRYAGAIN
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, TRYAGAIN_PAUSE[1])
                    address = await self._where(key)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                self._stale = True  # a node down or failing over: re-read before the next
                raise

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        async def send(address: Node, asking: bool) -> Any:
            client = self.node(address)
            if not asking:
                return await client.execute_command(*args, **options)  # type: ignore[no-untyped-call]
            async with client.pipeline(transaction=False) as pipe:
                pipe.execute_command("ASKING")
                pipe.execute_command(*args, **options)
                _, reply = await pipe.execute()
            return reply

        return await self.routed(command_key(args), send)

    # -- what does not go through execute_command ---------------------------------------

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        return ClusterPipeline(self, transaction)

    def pubsub(self, **kwargs: Any) -> PubSub:
        """Pub/sub on one primary (PUBLISH in a cluster reaches every node). Call
        ``initialize`` first: the node comes from the slot map."""
        primaries = self.get_primaries() or self.seeds
        return self.node(primaries[0]).pubsub(**kwargs)

    async def scan_iter(self, match: Any = None, count: int | None = None,  # type: ignore[override]
                        _type: str | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        """SCAN every primary in turn. A primary that cannot be reached (it died, its
        replica took over) has the slot map read again before the next command, as any
        command's failure does: else every later scan would go to the dead node."""
        await self.initialize()
        for address in self.get_primaries():
            try:
                async for key in self.node(address).scan_iter(match=match, count=count,
                                                              _type=_type, **kwargs):
                    yield key
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                self._stale = True
                raise

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        for lane in self._lanes.values():
            await lane.aclose()
        for client in self._nodes.values():
            await client.aclose()
        await super().aclose(close_connection_pool)


class ClusterPipeline(Pipeline):
    """Commands queued, then sent per node in one round trip each. Not a transaction
    across nodes: ``transaction=True`` needs every command on one slot (Redis refuses
    a MULTI that spans slots: CROSSSLOT). A command redirected (MOVED, ASK, TRYAGAIN)
    is sent again on its own; a redirected transaction as a whole."""

    def __init__(self, cluster: ClusterClient, transaction: bool) -> None:
        super().__init__(cluster.connection_pool, cluster.response_callbacks, transaction,
                         None)
        self.owner = cluster
        self.multi_slot_transaction = transaction
        self.queued: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __len__(self) -> int:
        return len(self.queued)

    async def __aenter__(self) -> ClusterPipeline:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.reset()

    async def reset(self) -> None:  # type: ignore[override]
        self.queued = []

    def execute_command(self, *args: Any, **options: Any) -> ClusterPipeline:  # type: ignore[override]
        self.queued.append((args, options))
        return self

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        queued, self.queued = self.queued, []
        if not queued:
            return []
        if self.multi_slot_transaction:
            replies = await self._transaction(queued)
        else:
            replies = await self._grouped(queued)
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return replies

    async def _transaction(self, queued: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        key = next((found for args, _ in queued if (found := command_key(args)) is not None),
                   None)

        async def send(address: Node, asking: bool) -> list[Any]:
            async with self.owner.node(address).pipeline(transaction=True) as pipe:
                for args, options in queued:
                    pipe.execute_command(*args, **options)
                return list(await pipe.execute())

        replies: list[Any] = await self.owner.routed(key, send, can_ask=False)
        return replies

    async def _grouped(self, queued: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        by_node: dict[Node, list[int]] = {}
        for index, (args, _) in enumerate(queued):
            by_node.setdefault(await self.owner._where(command_key(args)), []).append(index)
        replies: list[Any] = [None] * len(queued)
        for address, indexes in by_node.items():
            try:
                async with self.owner.node(address).pipeline(transaction=False) as pipe:
                    for index in indexes:
                        args, options = queued[index]
                        pipe.execute_command(*args, **options)
                    got = await pipe.execute(raise_on_error=False)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                self.owner._stale = True
                raise
            for index, reply in zip(indexes, got, strict=True):
                if isinstance(reply, Exception) and redirect_of(reply) is not None:
                    args, options = queued[index]
                    try:
                        reply = await self.owner.execute_command(*args, **options)
                    except redis.exceptions.ResponseError as exc:
                        reply = exc
                replies[index] = reply
        return replies


class ClusterLane:
    """The hot path's script calls on a cluster: each on a connection of the node that
    serves its first key (a ``Lane`` per node), with the cluster's redirect rules."""

    def __init__(self, cluster: ClusterClient) -> None:
        self.cluster = cluster

    async def evalsha(self, sha: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        return await self.call(b"EVALSHA", sha, len(keys), *keys, *args)

    async def call(self, *command: Any) -> Any:
        async def send(address: Node, asking: bool) -> Any:
            lane = self.cluster.lane(address)
            return await (lane.call_asking(*command) if asking else lane.call(*command))

        return await self.cluster.routed(command_key(command), send)

    async def call_many(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """``Lane.call_many`` on the node that serves the first command's key (the
        others are keyless or in its slot); a redirect of the first is followed."""
        async def send(address: Node, asking: bool) -> list[Any]:
            replies = await self.cluster.lane(address).call_many(commands, asking=asking)
            first = replies[0] if replies else None
            if isinstance(first, redis.exceptions.ResponseError) and redirect_of(first):
                raise first  # did not run: routed() sends the lot where the slot is
            return replies

        return await self.cluster.routed(command_key(tuple(commands[0])), send)

    async def aclose(self) -> None:
        pass  # the lanes are the cluster client's: closed with it
