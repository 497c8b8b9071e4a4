"""Store: the only object that issues Redis commands, in the words of the domain.

The worker and the client speak of raw jobs (``bytes``, exactly as stored), queues and
identities; the Store turns that into keys and script calls. It is a facade over parts,
one per concern, each in its own module over one ``Shared`` state (``part.py``):

| part | holds |
|---|---|
| ``store.moves`` (``moves.py``) | enqueue, schedule, fetch, settle, promote, claim a tick |
| ``store.queues`` (``queues.py``) | the queue registry, wake-ups, the backlog |
| ``store.liveness`` (``liveness.py``) | processes, their in-progress lists, recovery |
| ``store.records`` (``records.py``) | status records, cancels, progress |
| ``store.stats`` (``stats.py``) | totals, daily counts, run metrics |
| ``store.locks`` (``locks.py``) | owner locks and periodic claims |
| ``store.pausing`` (``pausing.py``) | a queue's pause |
| ``store.batches`` (``batches.py``) | batches: open, add, seal, their members' ends, callbacks |
| ``store.dependencies`` (``dependencies.py``) | jobs held until their parents end |
| ``store.dedup`` (``dedup.py``) | the dedup modes' pushes: throttle, debounce, coalesce |
| ``store.finished_waits`` (``waits.py``) | the one pub/sub subscription ``result()`` waits on |

Every script runs through ``store.scripts`` (``scripts.py``). The first seven parts'
operations are also the Store's own (``store.enqueue`` is ``store.moves.enqueue``):
callers and tests that wrap one of those subclass the Store and override it. The later
parts are reached only as ``store.<part>.<operation>`` (``store.batches.open``). A part
whose class name would repeat another's elsewhere in the package carries ``Part``
(``StatsPart``, ``QueuesPart``, ``BatchesPart``: the admin model has its ``Stats``,
``Queues``, ``Batches``).
"""

from __future__ import annotations

import logging

import redis.asyncio

from cogworker_async.redis.batches import BatchesPart
from cogworker_async.redis.connection import ServerInfo, check_server, connect, maxmemory_policy
from cogworker_async.redis.dedup import Dedup
from cogworker_async.redis.dependencies import Dependencies
from cogworker_async.redis.durability import Durability
from cogworker_async.redis.errors import (  # noqa: F401  (the names callers used to import from here)
    AuthenticationError,
    ClusterUnreachable,
    ConnectionLost,
    LostReply,
    NoMaster,
    RedisError,
    Unavailable,
)
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import Liveness
from cogworker_async.redis.locks import Locks
from cogworker_async.redis.moves import Failure as Failure
from cogworker_async.redis.moves import Fetched as Fetched
from cogworker_async.redis.moves import Moves
from cogworker_async.redis.part import DEFAULT_DEAD_LIMITS as DEFAULT_DEAD_LIMITS
from cogworker_async.redis.part import DeadLimits as DeadLimits
from cogworker_async.redis.part import SetName as SetName
from cogworker_async.redis.part import Shared, Via
from cogworker_async.redis.pausing import Pausing
from cogworker_async.redis.queues import QueuesPart
from cogworker_async.redis.records import Records
from cogworker_async.redis.scripts import Scripts
from cogworker_async.redis.stats import FLUSH_NUMBER_TTL as FLUSH_NUMBER_TTL
from cogworker_async.redis.stats import StatsFlush as StatsFlush
from cogworker_async.redis.stats import StatsPart
from cogworker_async.redis.waits import FinishedWaits
from cogworker_async.settings import KEEP_STATUS, Settings

log = logging.getLogger(__name__)

def dead_limits_of(settings: Settings) -> DeadLimits:
    return DeadLimits(settings.dead_max_jobs, settings.dead_max_age)


def durability_of(settings: Settings) -> Durability | None:
    if settings.durability is None:
        return None
    return Durability(settings.durability, settings.durability_timeout,
                      settings.durability_replicas)


class Store:
    """Domain operations on one namespace, over one async connection pool."""

    def __init__(self, client: redis.asyncio.Redis, keys: Keys,
                 dead_limits: DeadLimits = DEFAULT_DEAD_LIMITS,
                 durability: Durability | None = None,
                 keep_status: float = KEEP_STATUS, *, track_jobs: bool = True) -> None:
        self.url: str | None = None
        """The URL it was opened from (``from_url``), to name in an error; else None."""
        self.scripts = Scripts(client, durability)
        self.shared = Shared.over(client, keys, self.scripts, dead_limits=dead_limits,
                                  keep_status=keep_status, track_jobs=track_jobs)
        self.queues = QueuesPart(self.shared)
        self.moves = Moves(self.shared, self.queues)
        self.stats = StatsPart(self.shared)
        self.liveness = Liveness(self.shared, self.stats)
        self.records = Records(self.shared, self.queues)
        self.locks = Locks(self.shared)
        self.pausing = Pausing(self.shared)
        self.batches = BatchesPart(self.shared)
        self.dependencies = Dependencies(self.shared, self.queues)
        self.dedup = Dedup(self.shared, self.queues)
        self.finished_waits = FinishedWaits(client)
        """The one subscription ``result()``'s waiters share (``waits.py``)."""

    @classmethod
    def from_url(cls, url: str, namespace: str,
                 dead_limits: DeadLimits = DEFAULT_DEAD_LIMITS,
                 durability: Durability | None = None,
                 keep_status: float = KEEP_STATUS, *, track_jobs: bool = True) -> Store:
        store = cls(connect(url), Keys(namespace), dead_limits, durability, keep_status,
                    track_jobs=track_jobs)
        store.url = url
        return store

    # -- the shared state, as attributes (read and, by tests and tools, set) ---------

    @property
    def client(self) -> redis.asyncio.Redis:
        return self.shared.client

    @property
    def keys(self) -> Keys:
        return self.shared.keys

    @property
    def durability(self) -> Durability | None:
        """What enqueues and settles wait for (``durability.py``); None: nothing."""
        return self.scripts.durability

    @property
    def dead_limits(self) -> DeadLimits:
        return self.shared.dead_limits

    @dead_limits.setter
    def dead_limits(self, limits: DeadLimits) -> None:
        self.shared.dead_limits = limits

    @property
    def keep_status(self) -> float:
        return self.shared.keep_status

    @property
    def track_jobs(self) -> bool:
        return self.shared.track_jobs

    @property
    def cluster(self) -> bool:
        return self.shared.cluster

    @cluster.setter
    def cluster(self, value: bool) -> None:
        self.shared.cluster = value

    def record_prefix(self, queue: str) -> str:
        return self.moves.record_prefix(queue)

    def zset_key(self, queue: str, target: SetName) -> str:
        return self.moves.zset_key(queue, target)

    # -- the server ------------------------------------------------------------------

    async def aclose(self) -> None:
        await self.finished_waits.aclose()
        await self.scripts.aclose()
        await self.client.aclose()

    async def eviction_policy(self) -> str | None:
        """Redis' ``maxmemory-policy``, or None when this user may not read it."""
        policy, _ = await maxmemory_policy(self.client)
        return policy

    async def check_server(self, *, reliable: bool) -> ServerInfo:
        info = await check_server(self.client, reliable=reliable)
        # A worker fails here, before it fetches a job.
        await self.scripts.check_durability()
        if self.durability is not None and self.durability.mode == "replica":
            await self._check_replicas()
        return info

    async def _check_replicas(self) -> None:
        """Warn once at start when ``durability="replica"`` cannot be met now: every
        enqueue and settle would fail until a replica connects."""
        try:
            replication = await self.client.info("replication")
        except RedisError:
            return  # not allowed to read it (ACL): the first WAIT will say
        wanted = self.durability.replicas if self.durability is not None else 1
        if int(replication.get("connected_slaves", 0) or 0) < wanted:
            log.warning("durability='replica' waits for %d replica(s), but the master has "
                        "fewer connected: enqueues and settles fail with NotDurable until "
                        "they connect", wanted)

    # -- every part's operations, as the Store's -------------------------------------

    # moves.py
    enqueue = Via("moves", Moves.enqueue)
    schedule = Via("moves", Moves.schedule)
    fetch = Via("moves", Moves.fetch)
    ack = Via("moves", Moves.ack)
    file_failure = Via("moves", Moves.file_failure)
    give_back = Via("moves", Moves.give_back)
    pop = Via("moves", Moves.pop)
    push_back = Via("moves", Moves.push_back)
    file_entry = Via("moves", Moves.file_entry)
    due = Via("moves", Moves.due)
    promote = Via("moves", Moves.promote)
    move_member = Via("moves", Moves.move_member)
    enqueue_unique = Via("moves", Moves.enqueue_unique)
    push_batch = Via("moves", Moves.push_batch)
    cron_claim = Via("moves", Moves.cron_claim)

    # queues.py
    register_queues = Via("queues", QueuesPart.register_queues)
    queue_names = Via("queues", QueuesPart.queue_names)
    wake_ups = Via("queues", QueuesPart.wake_ups)
    backlog = Via("queues", QueuesPart.backlog)
    name_levels = Via("queues", QueuesPart.name_levels)

    # stats.py
    add_stats = Via("stats", StatsPart.add_stats)
    flush_stats = Via("stats", StatsPart.flush_stats)
    run_metrics = Via("stats", StatsPart.run_metrics)

    # locks.py
    take_lock = Via("locks", Locks.take_lock)
    lock_holder = Via("locks", Locks.lock_holder)
    release_lock = Via("locks", Locks.release_lock)
    extend_lock = Via("locks", Locks.extend_lock)
    cron_claimed = Via("locks", Locks.cron_claimed)

    # liveness.py
    requeue = Via("liveness", Liveness.requeue)
    recover = Via("liveness", Liveness.recover)
    relist = Via("liveness", Liveness.relist)
    clear_declared_dead = Via("liveness", Liveness.clear_declared_dead)
    in_progress = Via("liveness", Liveness.in_progress)
    registered_identities = Via("liveness", Liveness.registered_identities)
    queue_identities = Via("liveness", Liveness.queue_identities)
    scanned_lists = Via("liveness", Liveness.scanned_lists)
    beat_info = Via("liveness", Liveness.beat_info)
    record_recovery = Via("liveness", Liveness.record_recovery)
    forget = Via("liveness", Liveness.forget)
    list_head = Via("liveness", Liveness.list_head)
    bury_orphan = Via("liveness", Liveness.bury_orphan)
    park_unsettled = Via("liveness", Liveness.park_unsettled)
    file_unsettled = Via("liveness", Liveness.file_unsettled)
    orphan_counts = Via("liveness", Liveness.orphan_counts)
    is_alive = Via("liveness", Liveness.is_alive)
    orphan_count = Via("liveness", Liveness.orphan_count)

    # records.py
    job_status = Via("records", Records.job_status)
    alive_in = Via("records", Records.alive_in)
    running_statuses = Via("records", Records.running_statuses)
    cancel_job = Via("records", Records.cancel_job)
    close_records = Via("records", Records.close_records)
    set_progress = Via("records", Records.set_progress)
    take_cancels = Via("records", Records.take_cancels)
    sweep_records = Via("records", Records.sweep_records)

    # pausing.py
    pause = Via("pausing", Pausing.pause)
    resume = Via("pausing", Pausing.resume)
    pauses = Via("pausing", Pausing.pauses)
