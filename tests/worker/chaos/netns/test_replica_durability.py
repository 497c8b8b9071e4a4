"""What ``durability="replica"`` keeps through a partition that Sentinel fails over.

``WAIT`` counts the replicas that have a write; Redis' own documentation warns that it
cannot stop the write from being lost if a replica that did not get it is promoted. This
runs that case on real links (netlab.py, the lab ``route``d: every server in its own
namespace): Sentinel (3 sentinels, quorum 2), a master M with two replicas R1 and R2,
and an enqueuer (the public API, in the test process, through ``redis+sentinel://``)
enqueuing jobs with known tags at a steady rate and recording each one acknowledged.
After ``BEFORE_CUT`` acknowledgements the lab cuts M and R1 off from R2 and the
sentinels: M keeps R1, so ``WAIT 1`` still succeeds on M, while the sentinels promote
R2. Once the enqueuer has followed the new master the cut heals; the sentinels turn M
and R1 into replicas of R2, and resyncing them discards what only they had. Counted:
the acknowledged enqueues missing from the new master (and so from every node).

Three configurations (figures in docs/reliability.md, "Replication is asynchronous"):

- ``wait-1``: ``durability="replica"`` as it was, ``WAIT 1``: enqueues are lost — every
  one acknowledged between the cut and the promotion (M and R1 confirmed it).
- ``min-replicas``: the same, with ``min-replicas-to-write 2`` and
  ``min-replicas-max-lag 1`` on every server: M refuses writes once R2's last
  acknowledgement is more than a second old — fewer lost, not none (the lag window).
- ``wait-all``: ``durability_replicas=2`` (``WAIT 2``): M cannot get R2's
  confirmation, every enqueue after the cut fails with ``NotDurable`` — none lost.

Reproduce: ``.venv/bin/python -m pytest -s -p no:cacheprovider -n 0
tests/worker/chaos/netns/test_replica_durability.py`` (root; each prints a ``CHAOS``
line with its figures).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

import anyio
import pytest
import redis.asyncio

from cogworker_async.redis.keys import Keys
from cogworker_async.redis.sentinel import FOLLOW_EVERY
from tests.servers import server_binary
from tests.waiting import wait_until
from tests.worker.chaos.netns import netapp
from tests.worker.chaos.netns.conftest import marks, report
from tests.worker.chaos.netns.netlab import REDIS_PORT, Lab, Link

pytestmark = marks(short_timeout=100, full_timeout=300)

NODES: Final = ("m", "r1", "r2")
SENTINELS: Final = ("s1", "s2", "s3")
SENTINEL_PORT: Final = 26390
SERVICE: Final = "cogworker"
QUORUM: Final = 2
DOWN_AFTER_MS: Final = 1000
FAILOVER_TIMEOUT_MS: Final = 2000
"""As tests/sentinel_harness.py: a failure noticed in a second, a split vote retried soon."""
BEFORE_CUT: Final = 40
"""Enqueues acknowledged before the cut: the flow is running, through M."""
PERIOD: Final = 0.01
"""Seconds between one enqueue's outcome and the next enqueue: a steady flow."""
DURABILITY_TIMEOUT: Final = 1.0
AFTER_FOLLOW: Final = 3
"""Outcomes the enqueuer must have had after the promotion (plus FOLLOW_EVERY) before the
cut heals: it has left M, so nothing it sends after the heal lands there."""
START_TIMEOUT: Final = 15.0
DISCOVERY_TIMEOUT: Final = 30.0
"""Seconds the sentinels may take to see the master, both replicas and each other."""
FAILOVER_TIMEOUT: Final = 30.0
REJOIN_TIMEOUT: Final = 45.0
"""Seconds the sentinels may take, after the heal, to turn M and R1 into replicas of R2
(they wait about 8 s before reconfiguring an old master) and the full resyncs."""
FLOW_TIMEOUT: Final = 20.0


@dataclass(frozen=True)
class Config:
    name: str
    server: tuple[str, ...] = ()
    """Options of every redis-server (the replicas may be promoted)."""
    app: dict[str, Any] = field(default_factory=dict)


CONFIGS: Final = (
    Config("wait-1"),
    Config("min-replicas", server=("--min-replicas-to-write", "2",
                                   "--min-replicas-max-lag", "1")),
    Config("wait-all", app={"durability_replicas": 2}),
)


@dataclass
class Outcome:
    tag: str
    began: float
    ended: float
    error: str | None


@dataclass
class Topology:
    lab: Lab

    def addr(self, role: str) -> str:
        return self.lab.link(role).peer_addr

    def links(self, *roles: str) -> list[Link]:
        return [self.lab.link(role) for role in roles]

    @property
    def url(self) -> str:
        seeds = ",".join(f"{self.addr(s)}:{SENTINEL_PORT}" for s in SENTINELS)
        return f"redis+sentinel://{seeds}/{SERVICE}"

    @contextlib.asynccontextmanager
    async def client(self, role: str) -> AsyncIterator[redis.asyncio.Redis]:
        """A plain client of one server or sentinel, over the control link."""
        port = SENTINEL_PORT if role in SENTINELS else REDIS_PORT
        client = redis.asyncio.Redis(host=self.addr(role), port=port, socket_timeout=2,
                                     socket_connect_timeout=1, decode_responses=True)
        try:
            yield client
        finally:
            await client.aclose()

    async def ask(self, role: str, *command: Any) -> Any:
        async with self.client(role) as client:
            return await client.execute_command(*command)  # type: ignore[no-untyped-call]

    async def replication(self, role: str) -> dict[str, Any]:
        async with self.client(role) as client:
            return dict(await client.info("replication"))

    async def master_named(self) -> set[str]:
        """The master's address as each sentinel names it."""
        named = set()
        for sentinel in SENTINELS:
            host, _ = await self.ask(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            named.add(host)
        return named

    async def discovered(self) -> bool:
        """Every sentinel sees M as master, both replicas linked, the other sentinels."""
        for sentinel in SENTINELS:
            master = _pairs(await self.ask(sentinel, "SENTINEL", "MASTER", SERVICE))
            replicas = [_pairs(r) for r in await self.ask(sentinel, "SENTINEL", "REPLICAS",
                                                          SERVICE)]
            others = await self.ask(sentinel, "SENTINEL", "SENTINELS", SERVICE)
            healthy = {r["ip"] for r in replicas
                       if r["flags"] == "slave" and r.get("master-link-status") == "ok"}
            if (master["ip"] != self.addr("m") or master["flags"] != "master"
                    or healthy != {self.addr("r1"), self.addr("r2")}
                    or len(others) != len(SENTINELS) - 1):
                return False
        return True

    async def replicas_of(self, master: str, *replicas: str) -> bool:
        """``replicas`` follow ``master``, linked and caught up with it."""
        offset = int((await self.replication(master))["master_repl_offset"])
        for role in replicas:
            info = await self.replication(role)
            if (info["role"] != "slave" or info["master_host"] != self.addr(master)
                    or info["master_link_status"] != "up"
                    or int(info["slave_repl_offset"]) < offset):
                return False
        return True

    async def tags(self, role: str, namespace: str) -> list[str]:
        async with self.client(role) as client:
            raws = cast("list[str]", await client.lrange(Keys(namespace).queue("default"),
                                                         0, -1))
        return [str(json.loads(raw)["args"][0]) for raw in raws]


def _pairs(reply: Any) -> dict[str, str]:
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    items = list(reply)
    return {str(items[i]): str(items[i + 1]) for i in range(0, len(items) - 1, 2)}


@pytest.fixture
def lab() -> Iterator[Lab]:
    lab = Lab([*NODES, *SENTINELS])
    try:
        lab.create()
        lab.route()
        yield lab
    finally:
        lab.destroy()


async def start(lab: Lab, config: Config) -> Topology:
    """M, R1 and R2 (each in its namespace, ``config``'s options), then the sentinels;
    returns once every sentinel sees them all."""
    topology = Topology(lab)
    for role in NODES:
        where = lab.dir / role
        where.mkdir()
        replica_of = () if role == "m" else ("--replicaof", topology.addr("m"), str(REDIS_PORT))
        lab.spawn(lab.link(role).ns, [
            server_binary(), "--port", str(REDIS_PORT), "--bind", topology.addr(role),
            "--dir", str(where), "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--logfile", str(where / "redis.log"), "--protected-mode", "no",
            "--repl-diskless-sync-delay", "0", "--maxmemory", "256mb",
            *config.server, *replica_of])
    for role in SENTINELS:
        where = lab.dir / role
        where.mkdir()
        conf = where / "sentinel.conf"
        conf.write_text("\n".join([
            f"port {SENTINEL_PORT}", f"bind {topology.addr(role)}", "daemonize no",
            "protected-mode no", f"dir {where}", f"logfile {where / 'sentinel.log'}",
            f"sentinel monitor {SERVICE} {topology.addr('m')} {REDIS_PORT} {QUORUM}",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {SERVICE} 1", ""]))
        lab.spawn(lab.link(role).ns, [server_binary(), str(conf), "--sentinel"])

    async def answers() -> bool:
        for role in (*NODES, *SENTINELS):
            with contextlib.suppress(redis.exceptions.RedisError):
                await topology.ask(role, "PING")
                continue
            return False
        return True

    await wait_until(answers, timeout=START_TIMEOUT, every=0.05)
    await wait_until(lambda: topology.replicas_of("m", "r1", "r2"), timeout=START_TIMEOUT,
                     every=0.05)
    await wait_until(topology.discovered, timeout=DISCOVERY_TIMEOUT, every=0.1)
    return topology


async def flow(record: Any, outcomes: list[Outcome], stop: anyio.Event) -> None:
    """Enqueue ``j0``, ``j1``, ... one at a time until ``stop``, each outcome recorded."""
    number = 0
    while not stop.is_set():
        tag, number = f"j{number}", number + 1
        began = time.monotonic()
        error = None
        try:
            await record.enqueue(tag)
        except Exception as exc:  # what the caller sees is the point
            # A server short of replicas (min-replicas-to-write) refuses: NOREPLICAS.
            error = "NOREPLICAS" if str(exc).startswith("NOREPLICAS") else type(exc).__name__
        outcomes.append(Outcome(tag, began, time.monotonic(), error))
        await anyio.sleep(PERIOD)


def acked(outcomes: Sequence[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.error is None]


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
async def test_acknowledged_enqueues_through_a_partition_and_failover(
    lab: Lab, config: Config, namespace: str,
) -> None:
    topology = await start(lab, config)
    jobs = netapp.build(topology.url, namespace, durability="replica",
                        durability_timeout=DURABILITY_TIMEOUT, **config.app)
    outcomes: list[Outcome] = []
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(flow, jobs.record, outcomes, stop)
            try:
                await wait_until(lambda: len(acked(outcomes)) >= BEFORE_CUT,
                                 timeout=FLOW_TIMEOUT)
                lab.cut(topology.links("m", "r1"), topology.links("r2", *SENTINELS))
                cut_at = time.monotonic()

                async def promoted() -> bool:
                    return await topology.master_named() == {topology.addr("r2")}

                await wait_until(promoted, timeout=FAILOVER_TIMEOUT, every=0.02)
                promoted_at = time.monotonic()
                await wait_until(lambda: sum(o.began > promoted_at + FOLLOW_EVERY
                                             for o in outcomes) >= AFTER_FOLLOW,
                                 timeout=FLOW_TIMEOUT)
            finally:
                stop.set()
    finally:
        await jobs.app.close()
    for link in topology.links(*NODES, *SENTINELS):
        lab.heal(link)
    healed_at = time.monotonic()
    await wait_until(lambda: topology.replicas_of("r2", "m", "r1"), timeout=REJOIN_TIMEOUT,
                     every=0.1)
    rejoined_in = time.monotonic() - healed_at

    kept = set(await topology.tags("r2", namespace))
    assert set(await topology.tags("m", namespace)) == kept  # resynced: one history
    before = [o for o in acked(outcomes) if o.ended < cut_at]
    after = [o for o in acked(outcomes) if o.ended >= cut_at]
    lost = [o for o in acked(outcomes) if o.tag not in kept]
    refused = Counter(o.error for o in outcomes if o.error is not None)
    report(f"replica_durability[{config.name}]",
           acked=len(acked(outcomes)), acked_before_cut=len(before),
           acked_after_cut=len(after), lost=len(lost),
           lost_window_s=round(max((o.ended for o in lost), default=cut_at) - cut_at, 2),
           refused=dict(refused), promoted_after_s=round(promoted_at - cut_at, 2),
           rejoined_in_s=round(rejoined_in, 1))
    assert all(o.tag in kept for o in before)  # nothing acknowledged before the cut
    assert {o.tag for o in lost} <= {o.tag for o in after}
    if config.name == "wait-1":
        assert lost, "WAIT 1 kept every acknowledged enqueue: the case did not happen"
    elif config.name == "min-replicas":
        assert refused["NOREPLICAS"] > 0
    elif config.name == "wait-all":
        assert not lost
        assert refused["NotDurable"] > 0
