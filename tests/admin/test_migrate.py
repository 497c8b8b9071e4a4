"""The migration from the 0.1 key layout: a 0.1 dataset planted with raw commands (two
queues, their scheduled/retry/dead entries in 0.1's shared sets, a dead process's
in-progress list, stats, a periodic claim, unique locks, 0.1's bookkeeping) is moved
into the per-slot layout — every job in its new place exactly once, a queue's order
kept, the old keys gone — and a worker of this version then runs it. Run again it is a
no-op, a dry run changes nothing, and a live 0.1 worker makes it refuse."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import pytest
import redis.asyncio
from typer.testing import CliRunner

from cogworker_async import App
from cogworker_async.admin import migrate as migration
from cogworker_async.admin.migrate import (
    MigrationReport,
    OldKeys,
    OldWorkersAlive,
    kind_of,
    migrate,
    staging,
)
from cogworker_async.cli import cli
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.liveness import as_bytes
from cogworker_async.redis.store import Store
from tests.cli import adminapp
from tests.clients import async_client
from tests.cluster_harness import ClusterProcess
from tests.waiting import wait_until

QUEUES: Final = ("default", "mail")
IDENTITY: Final = "host-1-4242-abcd"
DAY: Final = "2026-01-01"
TICK: Final = 1_700_000_000.0
LOCK_TTL_MS: Final = 600_000
HELD: Final = "a" * 64
"""Digest of the unique lock held by the queued job ``d2``."""
STALE: Final = "b" * 64
"""Digest of a unique lock whose job waits nowhere (it ran; its release was lost)."""
PERIODIC_QUEUES: Final = {"tick": "mail"}
NOW: Final = time.time()


def payload(jid: str, queue: str, **extra: Any) -> bytes:
    """A job as 0.1 stored it."""
    return json.dumps({"jid": jid, "class": "work", "args": [jid], "kwargs": {},
                       "queue": queue, "created_at": NOW, "enqueued_at": NOW,
                       "retry": True, **extra}).encode()


@dataclass
class Planted:
    """What a 0.1 dataset holds, and where each entry belongs in the new layout."""

    lists: dict[str, list[bytes]] = field(default_factory=dict)
    """New list key -> its expected content, left to right."""
    zsets: dict[str, dict[bytes, float]] = field(default_factory=dict)
    """New zset key -> its expected members and scores."""
    runnable: set[str] = field(default_factory=set)
    """jids a worker runs after the migration (waiting, in progress, due)."""


async def plant(client: redis.asyncio.Redis, old: OldKeys, keys: Keys, *,
                due_in: float = 600.0) -> Planted:
    """A 0.1 dataset (as 0.1's scripts left it) under ``old``; what ``keys`` should hold
    after the migration. ``due_in``: seconds until the scheduled and retry entries are
    due (negative: due now)."""
    planted = Planted()
    default, mail = QUEUES
    # Queues: pushed on the left, fetched on the right; d1 is next to run.
    queued = {default: [payload("d1", default),
                        payload("d2", default, unique_digest=HELD,
                                unique_policy="until_executed"),
                        payload("d3", default)],
              mail: [payload("m1", mail), payload("m2", mail)]}
    for queue, raws in queued.items():
        for raw in raws:
            await client.lpush(old.queue(queue), raw)
    await client.sadd(old.key("queues"), *QUEUES)
    # A dead process's list: fetched (LMOVE right -> left) p1 then p2.
    running = [payload("p1", default), payload("p2", mail)]
    for raw in running:
        await client.lpush(old.in_progress(IDENTITY), raw)
    for queue, raws in queued.items():  # in progress runs first, then the oldest
        planted.lists[keys.queue(queue)] = [
            *reversed(raws), *(r for r in running if json.loads(r)["queue"] == queue)]
    planted.runnable |= {"d1", "d2", "d3", "m1", "m2", "p1", "p2"}
    for kind, target in (("schedule", keys.schedule), ("retry", keys.retry)):
        for queue in QUEUES:
            raw = payload(f"{kind}-{queue}", queue)
            await client.zadd(old.key(kind), {raw: NOW + due_in})
            planted.zsets.setdefault(target(queue), {})[raw] = NOW + due_in
            planted.runnable.add(f"{kind}-{queue}")
    for queue in QUEUES:
        raw = payload(f"dead-{queue}", queue, error_class="ValueError")
        await client.zadd(old.key("dead"), {raw: NOW - 60})
        planted.zsets.setdefault(keys.dead(queue), {})[raw] = NOW - 60
    await client.zadd(old.key("dead"), {b"\xffnot json": NOW - 30})  # unreadable: default
    planted.zsets[keys.dead(default)][b"\xffnot json"] = NOW - 30
    orphan = payload("o1", mail)
    await client.rpush(old.key("repeat_orphans"), orphan)
    planted.lists[keys.repeat_orphans(mail)] = [orphan]
    record = json.dumps({"set": "dead", "delay": 0.0,
                         "payload": payload("u1", mail).decode()}).encode()
    await client.rpush(old.key("unsettled"), record)
    planted.lists[keys.unsettled(mail)] = [record]
    await plant_the_rest(client, old)
    return planted


async def plant_the_rest(client: redis.asyncio.Redis, old: OldKeys) -> None:
    """Counters, claims, locks, and 0.1's bookkeeping about its (stopped) processes."""
    await client.set(old.key("stats:processed"), 10)
    await client.set(old.key("stats:failed"), 3)
    await client.set(old.stats_processed_on(DAY), 4, ex=3600)
    await client.set(old.stats_failed_on(DAY), 1, ex=3600)
    await client.hset(old.key("cron:claimed"), "tick", repr(TICK))
    await client.set(old.periodic_running("tick"), "p9")
    await client.set(old.unique(HELD), "d2", px=LOCK_TTL_MS)
    await client.set(old.unique(STALE), "ran-long-ago", px=LOCK_TTL_MS)
    await client.sadd(old.key("in_progress_identities"), IDENTITY)
    await client.hset(old.key("last_beat"), IDENTITY, NOW - 3600)
    await client.hset(old.key("beats"), IDENTITY, json.dumps({"pid": 4242}))
    await client.sadd(old.key("declared_dead"), "host-0-1-dead")
    await client.lpush(old.key("recoveries"), json.dumps({"identity": "host-0-1-dead"}))
    await client.hset(old.workers(IDENTITY), "0", json.dumps({"jid": "p1"}))
    await client.set(old.orphanings("p1"), 1)
    await client.set(old.key("recovery_lock"), IDENTITY)


async def members(client: redis.asyncio.Redis, key: str) -> list[bytes]:
    kind = as_bytes(await client.type(key))
    if kind == b"list":
        return [as_bytes(r) for r in await client.lrange(key, 0, -1)]
    if kind == b"zset":
        found: Any = await client.zrange(key, 0, -1)
        return [as_bytes(r) for r in found]
    return []


async def keys_under(client: redis.asyncio.Redis, namespace: str) -> list[bytes]:
    return sorted([as_bytes(k) async for k in client.scan_iter(match=OldKeys(namespace).pattern)])


async def snapshot(client: redis.asyncio.Redis, *namespaces: str) -> dict[bytes, Any]:
    """Every key under ``namespaces`` with its type and content (not its TTL)."""
    found: dict[bytes, Any] = {}
    for namespace in namespaces:
        for key in await keys_under(client, namespace):
            kind = as_bytes(await client.type(key))
            reads = {b"list": lambda k: client.lrange(k, 0, -1),
                     b"zset": lambda k: client.zrange(k, 0, -1, withscores=True),
                     b"hash": client.hgetall, b"set": client.smembers, b"string": client.get}
            found[key] = (kind, await reads[kind](key))
    return found


async def check_migrated(client: redis.asyncio.Redis, keys: Keys, old: OldKeys,
                         planted: Planted, report: MigrationReport) -> None:
    """Every planted job in its new place exactly once, queues in order, the rest of the
    data moved, and nothing of 0.1 left."""
    for key, expected in planted.lists.items():
        assert [as_bytes(r) for r in await client.lrange(key, 0, -1)] == expected, key
    for key, scored in planted.zsets.items():
        stored: Any = await client.zrange(key, 0, -1, withscores=True)
        assert dict(stored) == scored, key
    everywhere: Counter[bytes] = Counter()
    for queue in QUEUES:
        for key in (keys.queue(queue), keys.schedule(queue), keys.retry(queue),
                    keys.dead(queue), keys.repeat_orphans(queue), keys.unsettled(queue),
                    staging(keys, queue)):
            everywhere.update(await members(client, key))
    expected_everywhere = Counter(r for rs in planted.lists.values() for r in rs)
    expected_everywhere.update(m for ms in planted.zsets.values() for m in ms)
    assert everywhere == expected_everywhere  # each exactly once, nothing else
    assert {as_bytes(q) for q in await client.smembers(keys.queues)} == {
        q.encode() for q in QUEUES}

    for key, count in ((keys.stats_processed, b"10"), (keys.stats_failed, b"3"),
                       (keys.stats_processed_on(DAY), b"4"), (keys.stats_failed_on(DAY), b"1")):
        assert await client.get(key) == count, key
    assert 0 < await client.pttl(keys.stats_processed_on(DAY)) <= 3600 * 1000
    assert await client.hgetall(keys.cron_claimed("mail")) == {b"tick": repr(TICK).encode()}
    assert await client.get(keys.unique("default", HELD)) == b"d2"
    assert 0 < await client.pttl(keys.unique("default", HELD)) <= LOCK_TTL_MS
    for queue in QUEUES:
        assert await client.exists(keys.unique(queue, STALE)) == 0

    assert [k for k in await keys_under(client, old.namespace)
            if not k.startswith(f"{keys.namespace}:{{".encode())] == []
    assert report == expected_report(old.namespace, keys.namespace, dry_run=False)


def expected_report(old: str, new: str, *, dry_run: bool) -> MigrationReport:
    return MigrationReport(
        old, new, dry_run, queued={"default": 3, "mail": 2},
        requeued={"default": 1, "mail": 1}, scheduled={"default": 1, "mail": 1},
        retries={"default": 1, "mail": 1}, dead={"default": 2, "mail": 1},
        repeat_orphans=1, unsettled=1, processed=10, failed=3, days=2, cron_claims=1,
        unique_locks=1, unique_dropped=1,
        deleted=10)  # 8 of bookkeeping, the periodic running lock, 0.1's queue registry


async def run(store: Store, old_namespace: str, **options: Any) -> MigrationReport:
    return await migrate(store, old_namespace, default_queue="default",
                         periodic_queues=PERIODIC_QUEUES, **options)


# -- one server ---------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [2, migration.BATCH], ids=["small-batches", "default"])
async def test_every_job_lands_once_in_its_queue_slot_in_order(
    store: Store, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In batches of 2, every list and set takes several: the order and the count of
    what moves must not depend on where a batch ends."""
    monkeypatch.setattr(migration, "BATCH", batch)
    old = OldKeys(store.keys.namespace)  # the default: the App's own namespace
    planted = await plant(store.client, old, store.keys)
    # An upgraded client enqueued already: the old jobs were first, they run first.
    await store.enqueue("default", [payload("new", "default")])
    planted.lists[store.keys.queue("default")].insert(0, payload("new", "default"))

    report = await run(store, old.namespace)

    await check_migrated(store.client, store.keys, old, planted, report)


async def test_a_second_run_is_a_no_op(store: Store) -> None:
    old = OldKeys(store.keys.namespace)
    await plant(store.client, old, store.keys)
    await run(store, old.namespace)
    before = await snapshot(store.client, old.namespace)

    again = await run(store, old.namespace)

    assert again == MigrationReport(old.namespace, store.keys.namespace, False)
    assert await snapshot(store.client, old.namespace) == before


async def test_a_dry_run_changes_nothing_and_counts_what_the_run_moves(store: Store) -> None:
    old = OldKeys(store.keys.namespace)
    await plant(store.client, old, store.keys)
    before = await snapshot(store.client, old.namespace)

    dry = await run(store, old.namespace, dry_run=True)

    assert await snapshot(store.client, old.namespace) == before
    assert dry == expected_report(old.namespace, store.keys.namespace, dry_run=True)
    assert (await run(store, old.namespace)).jobs == dry.jobs


async def test_a_live_01_worker_makes_it_refuse_unless_forced(store: Store) -> None:
    old = OldKeys(store.keys.namespace)
    await plant(store.client, old, store.keys)
    await store.client.set(old.process(IDENTITY), "1", ex=60)  # beating
    before = await snapshot(store.client, old.namespace)

    with pytest.raises(OldWorkersAlive, match=r"stop every worker of an earlier build") as refused:
        await run(store, old.namespace)

    assert refused.value.identities == [IDENTITY]
    assert await snapshot(store.client, old.namespace) == before
    forced = await run(store, old.namespace, force=True)
    assert forced.alive == [IDENTITY]
    assert await store.client.exists(old.process(IDENTITY)) == 0


async def test_an_interrupted_run_is_finished_by_the_next(store: Store) -> None:
    """Where a crash leaves a queue: its oldest jobs staged, the rest still on the old
    list (and the staged batch possibly still there too: a duplicate, never a loss)."""
    old, keys = OldKeys(store.keys.namespace), store.keys
    d1, d2, d3 = (payload(jid, "default") for jid in ("d1", "d2", "d3"))
    await store.client.rpush(old.queue("default"), d3, d2)  # d1 was moved to staging...
    await store.client.sadd(keys.queues, "default")  # ...once registered
    await store.client.rpush(staging(keys, "default"), d1)

    report = await run(store, old.namespace)

    assert await store.client.lrange(keys.queue("default"), 0, -1) == [d3, d2, d1]
    assert await store.client.exists(staging(keys, "default"), old.queue("default")) == 0
    assert (report.staged, report.queued) == (1, {"default": 2})


async def test_a_01_client_still_enqueueing_loses_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.1 clients not yet upgraded push on the old list's left while the migration takes
    batches from its right: whatever the interleaving, each job ends on the new queue
    exactly once (those pushed after the run are taken by the next one)."""
    monkeypatch.setattr(migration, "BATCH", 1)
    old = OldKeys(store.keys.namespace)
    waiting = [payload(f"w{n}", "default") for n in range(50)]
    late = [payload(f"late{n}", "default") for n in range(50)]
    await store.client.lpush(old.queue("default"), *waiting)

    async def enqueue_01() -> None:
        for raw in late:
            await store.client.lpush(old.queue("default"), raw)
            await anyio.sleep(0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(enqueue_01)
        await run(store, old.namespace)
    await run(store, old.namespace)

    moved = [as_bytes(r) for r in await store.client.lrange(store.keys.queue("default"), 0, -1)]
    assert Counter(moved) == Counter(waiting + late)
    assert [raw for raw in moved if raw in waiting] == waiting[::-1]  # w0 next to run
    assert await store.client.exists(old.queue("default")) == 0


async def test_keys_it_cannot_read_are_left_and_reported(store: Store) -> None:
    old = OldKeys(store.keys.namespace)
    await store.client.hset(old.key("stats:failed"), "not", "a count")
    await store.client.set(old.key("stats:processed"), "many")
    await store.client.set(old.key("someone-elses"), "x")
    await store.client.lpush(old.queue("no{braces}"), payload("x", "default"))

    report = await run(store, old.namespace)

    assert sorted(reason.split(": ")[0] for reason in report.skipped) == sorted(
        [old.key("stats:failed"), old.key("stats:processed"), old.queue("no{braces}")])
    assert report.unknown == [old.key("someone-elses")]
    for key in (old.key("stats:failed"), old.key("stats:processed"),
                old.key("someone-elses"), old.queue("no{braces}")):
        assert await store.client.exists(key) == 1


async def test_a_worker_started_after_the_migration_runs_the_jobs(
    make_app: Callable[..., App], store: Store
) -> None:
    app = make_app(queues=list(QUEUES))
    ran: list[str] = []

    @app.job(name="work")
    async def work(jid: str) -> None:
        ran.append(jid)

    old = OldKeys(store.keys.namespace)
    planted = await plant(store.client, old, store.keys, due_in=-1.0)
    await run(store, old.namespace)

    async with app.worker():
        await wait_until(lambda: set(ran) >= planted.runnable)
        await wait_until(lambda: queues_empty(store))
    assert Counter(ran) == Counter(planted.runnable)  # each once
    assert await store.client.exists(store.keys.unique("default", HELD)) == 0  # released


async def queues_empty(store: Store) -> bool:
    for queue in QUEUES:
        for key in (store.keys.queue(queue), store.keys.schedule(queue),
                    store.keys.retry(queue)):
            if await store.client.exists(key):
                return False
    return True


def test_the_old_names_are_read_as_0_1_wrote_them() -> None:
    old = OldKeys("{cogworker}")
    assert kind_of("queue:mail:eu") == ("queue", "mail:eu")
    assert kind_of("queues") == ("registry", "")
    assert kind_of("stats:processed:2026-01-01") == ("processed_on", "2026-01-01")
    assert kind_of("stats:processed") == ("processed", "")
    assert kind_of("in_progress_identities") == ("drop", "")
    assert kind_of("in_progress:host-1") == ("in_progress", "host-1")
    assert kind_of("{mail}:queue") is None  # the new layout's
    assert old.queue("mail") == "{cogworker}:queue:mail"
    assert OldKeys("a*b?[c]").pattern == "a\\*b\\?\\[c\\]:*"


# -- the command --------------------------------------------------------------------------


def test_the_command_migrates_once_and_refuses_while_01_beats(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGWORKER_REDIS_URL", redis_url)
    monkeypatch.setenv(adminapp.NAMESPACE_ENV, namespace)
    old, keys = OldKeys(f"{{{namespace}-0.1}}"), Keys(namespace)

    async def plant_old() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            await plant(client, old, keys)
            await client.set(old.process(IDENTITY), "1", ex=60)
        finally:
            await client.aclose()

    anyio.run(plant_old)
    command = ["migrate-keys", adminapp.TARGET, "--old-namespace", old.namespace]

    refused = CliRunner().invoke(cli, command)
    assert refused.exit_code == 1
    assert "error: 1 worker(s) of the first key layout look alive" in refused.stderr
    assert "Traceback" not in refused.output

    dry = CliRunner().invoke(cli, [*command, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["queued"] == {"default": 3, "mail": 2}

    done = CliRunner().invoke(cli, [*command, "--force"])
    assert done.exit_code == 0, done.output
    assert "jobs waiting on queues: 5 (default: 3, mail: 2)" in done.stdout
    assert "periodic claims: 1" in done.stdout

    again = CliRunner().invoke(cli, [*command, "--json"])
    assert again.exit_code == 0, again.output
    assert MigrationReport(**json.loads(again.stdout)).jobs == 0


def test_the_command_refuses_a_bad_old_namespace(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGWORKER_REDIS_URL", redis_url)
    monkeypatch.setenv(adminapp.NAMESPACE_ENV, namespace)

    result = CliRunner().invoke(cli, ["migrate-keys", adminapp.TARGET, "--old-namespace", ""])

    assert result.exit_code == 2
    assert "error: --old-namespace must not be empty" in result.stderr


# -- Redis Cluster --------------------------------------------------------------------------


@pytest.fixture
async def cluster_store(redis_cluster: ClusterProcess, namespace: str
                        ) -> AsyncIterator[Store]:
    found = Store.from_url(redis_cluster.url, namespace)
    yield found
    await found.aclose()


@pytest.mark.parametrize("old_form", ["{%s}", "%s"], ids=["hash-tagged", "plain"])
async def test_on_a_cluster(redis_cluster: ClusterProcess, cluster_store: Store,
                            old_form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.1 advised a hash-tagged namespace on a cluster (every old key on one node); a
    plain one spreads the old keys over the nodes. Either way, each key's move is
    single-key or within one slot (small batches: pipelines of several)."""
    monkeypatch.setattr(migration, "BATCH", 2)
    assert cluster_store.cluster
    keys = cluster_store.keys
    old = OldKeys(old_form % keys.namespace)
    client = async_client(redis_cluster.url)
    try:
        planted = await plant(client, old, keys)

        report = await run(cluster_store, old.namespace)

        await check_migrated(client, keys, old, planted, report)
        assert (await run(cluster_store, old.namespace)).jobs == 0
    finally:
        await client.aclose()
