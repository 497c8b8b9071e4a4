"""Every script stays on one hash slot: the key layout's promise for Redis Cluster.

Each script is called the way the code calls it — through the Store, and beat and forget
as the heartbeat's ``BeatWriter`` does — against the real server, and the KEYS of every
call are recorded on the way out (a ``Lane`` that records each EVALSHA/EVAL before it
sends it, a pipeline's EVALSHA likewise, and a ``SyncScript`` that records before it
runs). All the keys of one call must map to one slot (CRC16 of the hash tag), and that
slot must be the namespace's or one of the queues': a script spanning two slots would be
refused by a cluster (CROSSSLOT). The Store is told it is on a cluster, so it takes its
cluster paths (a fetch from several queues: one call per queue's slot).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.asyncio
from redis.crc import key_slot

from cogworker_async.redis import beats
from cogworker_async.redis.admin_queues import QueueReads
from cogworker_async.redis.beats import BeatWriter
from cogworker_async.redis.dependencies import Parent, Watcher
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.lane import Lane
from cogworker_async.redis.liveness import Requeued
from cogworker_async.redis.scripts import ROUTING_MARK, SCRIPT_NAMES, SyncScript, source
from cogworker_async.redis.store import Failure, StatsFlush, Store
from tests.redis.lua.helpers import fetched, jid_of, make_job
from tests.redis.lua.test_limits import limit_bucket, limit_concurrent, limit_window

IDENTITY = "host:1:abc"
OWNER = "dead-host:7:f00"
QUEUES = ["emails", "reports"]
INFO = {"hostname": "host", "pid": 1}

NAME_OF: dict[str, str] = {}
for _name in SCRIPT_NAMES:
    NAME_OF[hashlib.sha1(source(_name).encode()).hexdigest()] = _name
    NAME_OF[source(_name)] = _name


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Call:
    script: str
    keys: tuple[str, ...]
    routed: tuple[str, ...] = field(default=(), compare=False)
    """The keys declared for a cluster's routing only (scripts.py ``routing_keys``)."""


@dataclass
class Recorder:
    calls: list[Call] = field(default_factory=list)

    def record(self, sha_or_text: Any, keys: Sequence[Any]) -> None:
        """One script call: ``sha_or_text`` is what EVALSHA or EVAL sends first."""
        named = [_text(k) for k in keys]
        mark = next((i for i, key in enumerate(named) if ROUTING_MARK in key), None)
        if mark is not None:  # the script's own keys first, then the routing ones
            first = mark - int(named[mark].rsplit(ROUTING_MARK, 1)[1])
            named, routed = named[:first], named[first:]
        else:
            routed = []
        self.calls.append(Call(NAME_OF[_text(sha_or_text)], tuple(named), tuple(routed)))


class RecordingLane(Lane):
    """The Store's lane, recording each script call's KEYS before it sends it as is."""

    def __init__(self, client: redis.asyncio.Redis, recorder: Recorder) -> None:
        super().__init__(client)
        self.recorder = recorder

    async def call(self, *command: Any) -> Any:
        self._record(command)
        return await super().call(*command)

    async def call_many(self, commands: Sequence[Sequence[Any]], *,
                        asking: bool = False) -> list[Any]:
        for command in commands:
            self._record(command)
        return await super().call_many(commands, asking=asking)

    def _record(self, command: Sequence[Any]) -> None:
        if command[0] in (b"EVALSHA", b"EVAL"):
            self.recorder.record(command[1], command[3:3 + int(command[2])])


class RecordingScript(SyncScript):
    """BeatWriter's script runner, recording each call's KEYS before it runs it."""

    def __init__(self, text: str, recorder: Recorder) -> None:
        super().__init__(text)
        self.recorder = recorder

    def run(self, client: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        self.recorder.record(self.sha, keys)
        return super().run(client, keys, args)


@dataclass
class Setup:
    store: Store
    keys: Keys
    recorder: Recorder
    redis_url: str
    writers: list[BeatWriter] = field(default_factory=list)

    def writer(self, identity: str = IDENTITY) -> BeatWriter:
        """A heartbeat writer for QUEUES, recording its script calls."""
        writer = BeatWriter(self.redis_url, self.keys, identity, QUEUES)
        writer._beat = RecordingScript(source("beat"), self.recorder)
        writer._forget = RecordingScript(source("forget"), self.recorder)
        self.writers.append(writer)
        return writer


def record_pipelines(client: redis.asyncio.Redis, recorder: Recorder) -> None:
    """Make ``client``'s pipelines record each queued EVALSHA's KEYS (``set_progress``
    sends its scripts in one pipeline, not through the lane)."""
    original = client.pipeline

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = original(*args, **kwargs)
        execute_command = pipe.execute_command

        def recording(*command: Any, **options: Any) -> Any:
            if command[0] in (b"EVALSHA", b"EVAL"):
                recorder.record(command[1], command[3:3 + int(command[2])])
            return execute_command(*command, **options)

        pipe.execute_command = recording  # type: ignore[method-assign]
        return pipe

    client.pipeline = pipeline  # type: ignore[method-assign]


@pytest.fixture
def setup(store: Store, keys: Keys, redis_url: str) -> Iterator[Setup]:
    recorder = Recorder()
    store.cluster = True  # the cluster paths: one call per slot
    store.scripts.routed = True  # and the routing keys a cluster's calls declare
    store.scripts.lane = RecordingLane(store.client, recorder)
    record_pipelines(store.client, recorder)
    made = Setup(store, keys, recorder, redis_url)
    yield made
    for writer in made.writers:
        writer.close()


# -- each script, called as the code calls it ---------------------------------------------


async def enqueue(s: Setup) -> None:
    assert await s.store.enqueue("emails", [make_job("emails")]) == 1
    assert await s.store.push_batch("reports", [make_job("reports")]) == []
    assert Call("enqueue", (s.keys.queue("reports"),)) in s.recorder.calls, "the batch's"


async def enqueue_unique(s: Setup) -> None:
    raw = make_job("emails")
    assert await s.store.enqueue_unique("d1", jid_of(raw), 60.0, "emails", raw)
    assert await s.store.enqueue_unique("d2", jid_of(raw), 60.0, "emails", raw, delay=30.0)
    assert await s.store.enqueue_unique("d3", jid_of(raw), 60.0, "emails", raw, at=1.0)
    assert await s.store.push_batch("reports", [], [("d4", jid_of(raw), 60.0, raw)]) == [True]
    pushed = (s.keys.unique("reports", "d4"), s.keys.queue("reports"),
              s.keys.record("reports", jid_of(raw)))
    assert Call("enqueue_unique", pushed) in s.recorder.calls, "the batch's"


async def schedule(s: Setup) -> None:
    assert await s.store.schedule("emails", [make_job("emails")], delay=30.0) == 1
    await s.store.file_entry("reports", "dead", make_job("reports"), 0.0)


async def due(s: Setup) -> None:
    member = make_job("emails")
    await s.store.schedule("emails", [member], at=1.0)
    assert await s.store.due("emails", "schedule", 10) == [member]
    assert await s.store.due("reports", "retry", 10) == []


async def promote(s: Setup) -> None:
    member = make_job("emails")
    await s.store.schedule("emails", [member], at=1.0)
    assert await s.store.promote("emails", "schedule", [(member, member)]) == 1


async def fetch(s: Setup) -> None:
    for queue in QUEUES:
        await s.store.enqueue(queue, [make_job(queue)])
    assert len((await s.store.fetch(IDENTITY, QUEUES, 10)).jobs) == 2


async def ack(s: Setup) -> None:
    [raw] = await fetched(s.store, IDENTITY, [make_job("emails")], queue="emails")
    assert await s.store.ack(IDENTITY, "emails", [(raw, jid_of(raw)), (raw, None)]) == 1


async def file_failure(s: Setup) -> None:
    first, second = await fetched(s.store, IDENTITY, [make_job("emails"), make_job("emails")],
                                  queue="emails")
    assert await s.store.file_failure(IDENTITY, "emails", first, "retry", first, 5.0,
                                      failure=Failure(jid_of(first), "E: x", 2))
    assert await s.store.file_failure(IDENTITY, "emails", second, "dead", second, 0.0,
                                      failure=Failure(jid_of(second), "E: x", 1, keep=60.0))


async def give_back(s: Setup) -> None:
    [raw] = await fetched(s.store, IDENTITY, [make_job("emails")], queue="emails")
    assert await s.store.give_back(IDENTITY, "emails", raw)


async def park_unsettled(s: Setup) -> None:
    [raw] = await fetched(s.store, IDENTITY, [make_job("emails")], queue="emails")
    assert await s.store.park_unsettled(IDENTITY, "emails", raw, b'{"set": "dead"}')


async def file_unsettled(s: Setup) -> None:
    record = json.dumps({"set": "retry", "delay": 5, "payload": "{}"}).encode()
    await s.store.client.rpush(s.keys.unsettled("emails"), record)
    assert await s.store.file_unsettled("emails", record, "retry", b"{}", 5.0)


async def move_member(s: Setup) -> None:
    member = make_job("emails")
    await s.store.file_entry("emails", "retry", member, 60.0)
    assert await s.store.move_member("emails", "retry", "dead", member, member)


async def close_record(s: Setup) -> None:
    raw = make_job("emails")
    await s.store.enqueue("emails", [raw])
    await s.store.close_records([("emails", raw)])
    status = await s.store.job_status(jid_of(raw), ["emails"])
    assert status is not None
    assert status.state == "cancelled"


async def clear_queue(s: Setup) -> None:
    await s.store.enqueue("emails", [make_job("emails"), make_job("emails", group="acme")])
    assert await QueueReads(s.store).queue_clear("emails") == 2


async def debounce(s: Setup) -> None:
    raw = make_job("emails")
    assert (await s.store.dedup.debounce("d", jid_of(raw), 5.0, "emails", raw,
                                         name="send_email"))[0]


async def coalesce(s: Setup) -> None:
    raw = make_job("emails")
    assert (await s.store.dedup.coalesce("c", jid_of(raw), "emails", raw,
                                         name="send_email"))[0] == "new"


async def coalesce_popped(s: Setup) -> None:
    raw = make_job("emails")
    await s.store.dedup.coalesce("c", jid_of(raw), "emails", raw, name="send_email")
    assert await s.store.dedup.popped("emails", raw) == raw  # no merge: run as popped


async def requeue(s: Setup) -> None:
    await fetched(s.store, IDENTITY, [make_job("emails")], queue="emails")
    assert await s.store.requeue(IDENTITY, "emails") == 1
    await fetched(s.store, OWNER, [make_job("reports")], queue="reports")
    assert await s.store.recover(OWNER, "reports", dead_for=60.0,
                                 max_orphanings=3) == Requeued(moved=1)


async def relist(s: Setup) -> None:
    assert await s.store.relist(IDENTITY, "emails", [make_job("emails")]) == 1


async def bury_orphan(s: Setup) -> None:
    [raw] = await fetched(s.store, OWNER, [make_job("emails")], queue="emails")
    assert await s.store.recover(OWNER, "emails", dead_for=60.0,
                                 max_orphanings=0) == Requeued(parked=1)
    assert await s.store.bury_orphan("emails", raw, raw, jid_of(raw))


async def cancel(s: Setup) -> None:
    queued = make_job("emails")
    await s.store.enqueue("emails", [queued])
    assert await s.store.cancel_job("emails", jid_of(queued)) == "cancelled"
    [running] = await fetched(s.store, IDENTITY, [make_job("reports")], queue="reports")
    assert await s.store.cancel_job("reports", jid_of(running)) == "stopping"
    # The cancel set it wrote is not in its KEYS (named by a prefix and the record's
    # ``by``): it must be in the record's slot all the same.
    cancels = s.keys.cancels("reports", IDENTITY)
    assert key_slot(cancels.encode()) == key_slot(s.keys.record("reports", "x").encode())
    assert await s.store.take_cancels(IDENTITY, QUEUES) == [("reports", jid_of(running))]


async def progress(s: Setup) -> None:
    [raw] = await fetched(s.store, IDENTITY, [make_job("emails")], queue="emails")
    await s.store.set_progress(IDENTITY, [("emails", jid_of(raw), 0.5, b'{"step": 1}')])
    status = await s.store.job_status(jid_of(raw), ["emails"])
    assert status is not None
    assert status.progress == 0.5


async def take_lock(s: Setup) -> None:
    assert await s.store.take_lock(s.keys.recovery_lock, IDENTITY, 5.0)
    assert await s.store.take_lock(s.keys.periodic_running("emails", "nightly"), "jid-1", 5.0)


async def release_lock(s: Setup) -> None:
    raw = make_job("emails")
    assert await s.store.enqueue_unique("d1", jid_of(raw), 60.0, "emails", raw)
    assert await s.store.release_lock(s.keys.unique("emails", "d1"), jid_of(raw))
    await s.store.take_lock(s.keys.periodic_running("emails", "nightly"), "jid-1", 5.0)
    assert await s.store.release_lock(s.keys.periodic_running("emails", "nightly"), "jid-1")


async def extend_lock(s: Setup) -> None:
    raw = make_job("emails")
    assert await s.store.enqueue_unique("d1", jid_of(raw), 1.0, "emails", raw)
    assert await s.store.extend_lock(s.keys.unique("emails", "d1"), jid_of(raw), 60.0)


async def cron_claim(s: Setup) -> None:
    assert await s.store.cron_claim("nightly", 1_700_000_000.0, "emails", make_job("emails"))


async def beat(s: Setup) -> None:
    writer = s.writer()
    assert writer.beat(INFO, 30.0, first=True) == beats.ALIVE
    assert writer.beat(INFO, 30.0, first=False) == beats.ALIVE


async def forget(s: Setup) -> None:
    writer = s.writer()
    writer.beat(INFO, 30.0, first=True)
    assert writer.retire() is True
    # What recovery runs for a dead process: each queue's slot, then the namespace's.
    assert await s.store.forget(OWNER, "emails", declared_dead=True)
    assert await s.store.forget(OWNER, None, declared_dead=True)


async def add_stats(s: Setup) -> None:
    runs = {29_000_000: {"send|runs": 1, "send|us": 900}, 29_000_001: {"send|runs": 2}}
    assert await s.store.flush_stats(f"{IDENTITY}:run", StatsFlush(1, 3, 1, runs))


async def sweep_records(s: Setup) -> None:
    await s.store.enqueue("emails", [make_job("emails")])
    assert await s.store.sweep_records("emails") == ("0", 0)


async def batch_abandon(s: Setup) -> None:
    await s.store.batches.open("b-1")
    await s.store.batches.open("b-2", parent="b-1", token="t")
    assert await s.store.batches.abandon("b-2", "b-1", token="t") == "abandoned"


async def batch_open(s: Setup) -> None:
    assert await s.store.batches.open("b-1") == "opened"
    assert await s.store.batches.open("b-2", parent="b-1") == "opened"  # parent's keys too


async def batch_add(s: Setup) -> None:
    await s.store.batches.open("b-1")
    assert await s.store.batches.add("b-1", ["j1", "j2"]) == ["j1", "j2"]


async def batch_seal(s: Setup) -> None:
    await s.store.batches.open("b-1")
    assert await s.store.batches.seal("b-1") == "success"


async def batch_release(s: Setup) -> None:
    dead_block = f"f00.n@{OWNER}"  # the block of a process that died inside it
    await s.store.batches.open("b-1", token="f01.n@" + IDENTITY)
    await s.store.batches.open("b-2", parent="b-1", token=dead_block)
    assert await s.store.batches.release("b-2", [dead_block], "b-1") == "abandoned"
    assert await s.store.batches.release("b-1", None, None) is not None  # cancel_batch's


async def batch_repair(s: Setup) -> None:
    dead_block = f"f00.n@{OWNER}"
    await s.store.batches.open("b-1", token=dead_block)
    await s.store.batches.add("b-1", ["j1"])
    await s.store.batches.release("b-1", [dead_block], None)
    assert await s.store.batches.repair("b-1", "1", "abandoned", ["j1"]) == "abandoned"


async def batch_apply(s: Setup) -> None:
    await s.store.batches.open("b-1")
    await s.store.batches.add("b-1", ["j1"])
    assert await s.store.batches.apply("b-1", [("j1", "succeeded")]) == "open"


async def batch_fired(s: Setup) -> None:
    await s.store.batches.open("b-1")
    await s.store.batches.open("b-2", parent="b-1")
    await s.store.batches.seal("b-2")
    assert await s.store.batches.fired("b-2", ["complete", "success"], "b-1") == "success"


async def drop_notes(s: Setup) -> None:
    await s.store.client.rpush(s.keys.batch_notes("emails"), b"b-1\tj1\tsucceeded")
    assert await s.store.batches.drop_notes("emails", [b"b-1\tj1\tsucceeded"]) == 1


async def _waiting(s: Setup) -> tuple[str, str]:
    """A parent on "emails" and a job on "reports" waiting for it (two slots)."""
    parent = make_job("emails")
    await s.store.enqueue("emails", [parent])
    assert await s.store.dependencies.wait("reports", "kid", make_job("reports", jid="kid"),
                                           [Parent("emails", jid_of(parent))])
    return jid_of(parent), "kid"


async def dep_wait(s: Setup) -> None:
    await _waiting(s)


async def dep_watch(s: Setup) -> None:
    parent, kid = await _waiting(s)
    assert await s.store.dependencies.watch(Parent("emails", parent),
                                            Watcher("reports", kid)) == ("watching", "")


async def dep_apply(s: Setup) -> None:
    parent, kid = await _waiting(s)
    assert await s.store.dependencies.apply("reports", kid, [
        (Parent("emails", parent), "succeeded", "")]) == "released"


SCENARIOS: dict[str, Callable[[Setup], Awaitable[None]]] = {
    scenario.__name__: scenario for scenario in (
        ack, add_stats, batch_abandon, batch_add, batch_apply, batch_fired, batch_open,
        batch_release, batch_repair, batch_seal, beat,
        bury_orphan, cancel, clear_queue, close_record, coalesce, coalesce_popped,
        cron_claim, debounce,
        dep_apply, dep_wait, dep_watch,
        drop_notes, due, enqueue,
        enqueue_unique, extend_lock, fetch, file_failure, file_unsettled, forget, give_back,
        limit_bucket, limit_concurrent, limit_window, move_member, park_unsettled, progress,
        promote, release_lock, relist, requeue, schedule, sweep_records, take_lock,
    )
}


def test_every_script_has_a_scenario() -> None:
    assert sorted(SCENARIOS) == sorted(SCRIPT_NAMES)


async def test_a_record_script_declares_the_live_records_and_notes_of_its_slot(
    setup: Setup, keys: Keys,
) -> None:
    await setup.store.enqueue("emails", [make_job("emails")])
    call = [c for c in setup.recorder.calls if c.script == "enqueue"][-1]  # (after a NOSCRIPT)
    assert call.keys == (keys.queue("emails"),)
    assert call.routed[:2] == (keys.live_records("emails"), keys.batch_notes("emails"))


@pytest.mark.parametrize("name", SCRIPT_NAMES)
async def test_every_call_of_the_script_stays_on_one_slot(setup: Setup, name: str) -> None:
    await SCENARIOS[name](setup)

    calls = setup.recorder.calls
    assert any(call.script == name for call in calls), f"{name} was never called"
    known = {key_slot(key.encode()) for key in [
        setup.keys.queues, *(setup.keys.queue(queue) for queue in QUEUES)]}
    for call in calls:
        slots = {key_slot(key.encode()) for key in (*call.keys, *call.routed)}
        assert len(slots) == 1, f"{call.script} spans {len(slots)} slots: {call.keys}"
        assert slots <= known, f"{call.script} on a slot of no queue: {call.keys}"


async def test_a_fetch_from_several_queues_is_one_call_per_queue_on_a_cluster(
    setup: Setup, keys: Keys
) -> None:
    for queue in QUEUES:
        await setup.store.enqueue(queue, [make_job(queue)])
    setup.recorder.calls.clear()

    await setup.store.fetch(IDENTITY, QUEUES, 10)

    assert [call.keys for call in setup.recorder.calls] == [
        (keys.queue(queue), keys.in_progress(queue, IDENTITY)) for queue in QUEUES]


async def test_on_a_single_redis_a_fetch_from_several_queues_is_one_call(
    setup: Setup, keys: Keys
) -> None:
    # What the check above guards against, seen by the recorder: one call over two
    # slots, fine on a single Redis (one round trip), refused by a cluster.
    setup.store.cluster = False
    for queue in QUEUES:
        await setup.store.enqueue(queue, [make_job(queue)])
    setup.recorder.calls.clear()

    assert len((await setup.store.fetch(IDENTITY, QUEUES, 10)).jobs) == 2

    [call] = setup.recorder.calls
    assert len({key_slot(key.encode()) for key in call.keys}) == len(QUEUES)
