"""A co-tenant's garbage: every key the project reads (redis/keys.py), and values no
worker writes, to plant in them (issue 25, items 8-11 and the fuzz suite).

A planting is one key filled one way: its own Redis type holding a garbage value (where
the key holds JSON or numbers, the value is that garbage), or another Redis type
altogether. ``SPECS`` names each key with the type the project expects and the field or
member a reader looks at; ``GARBAGE`` is the values.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final, Literal

import pytest

from cogworker_async.jobs import unique
from cogworker_async.observe.run_metrics import minute_of
from cogworker_async.redis.dependencies import Parent, Watcher
from cogworker_async.redis.keys import BATCH_SETS, Keys
from cogworker_async.redis.store import Store
from tests.cli import adminapp
from tests.redis.lua.helpers import fetched, make_job

RedisType = Literal["string", "hash", "list", "set", "zset"]

FULL: Final = os.environ.get("COGWORKER_CHAOS", "").strip().lower() == "full"
"""``make chaos``: every value in every key, every check on each (see ``plantings``)."""

QUEUE: Final = "default"
GHOST: Final = "ghost-host:7:dead"
"""A process that fetched a job and died: recovery must take its job whatever else is
stored (its beat info above all)."""
LIMITERS: Final = {"lim-bucket": "bucket", "lim-window": "window", "lim-concurrent": "concurrent"}
DEEP: Final = 5000
"""Levels of nesting past the JSON parser's recursion limit (RecursionError)."""
NEAR_LIMIT: Final = 900
"""Levels the parser still takes, too deep to write back or render safely."""
HUGE: Final = 200_000
"""Characters of a huge (but parseable) value."""
HUGE_INT: Final = "9" * 400
"""An integer no float holds (``float()`` of it raises OverflowError)."""


BID: Final = "cotenant-batch"
"""A batch beside the garbage: one member, ended by a note not yet relayed."""
MEMBER: Final = "cotenant-member"
PARENT: Final = "cotenant-parent"
WAITER: Final = "cotenant-waiter"
"""A job waiting for ``PARENT`` (both queued on ``QUEUE``)."""
GROUP: Final = "cotenant-group"
PRIORITY: Final = 5
DEDUP_KEY: Final = "cotenant"
DIGEST: Final = unique.digest("ok", QUEUE, [], {}, lambda *_a, **_k: DEDUP_KEY)
"""The digest of ``ok``'s dedup keys on ``QUEUE`` with ``key=DEDUP_KEY`` (any mode)."""


@dataclass(frozen=True, slots=True)
class Garbage:
    name: str
    value: bytes


GARBAGE: Final[tuple[Garbage, ...]] = (
    Garbage("deep JSON list", b"[" * DEEP + b"]" * DEEP),
    Garbage("deep JSON object", b'{"a":' * DEEP + b"1" + b"}" * DEEP),
    Garbage("JSON just under the parser's limit", b"[" * NEAR_LIMIT + b"]" * NEAR_LIMIT),
    Garbage("huge JSON", json.dumps({"hostname": "h" * HUGE, "queues": [QUEUE] * 1000,
                                     "kind": "bucket", "capacity": 5}).encode()),
    Garbage("not UTF-8", b"\xff\xfe\xc3\x28 {\x80"),
    Garbage("infinity", b"inf"),
    Garbage("minus infinity", b"-inf"),
    Garbage("nan", b"nan"),
    Garbage("past a float", b"1e999"),
    Garbage("huge integer", HUGE_INT.encode()),
    Garbage("empty", b""),
    Garbage("a JSON list", b"[1, 2]"),
    Garbage("a JSON string", b'"text"'),
    Garbage("JSON null", b"null"),
    Garbage("fields of the wrong types", json.dumps({
        "since": "x", "by": 5, "queues": {"a": 1}, "hostname": [1], "pid": "x",
        "kind": "bucket", "capacity": "lots", "seconds": -1, "set": "dead", "payload": 5,
        "class": 7, "queue": 8, "run_at": "x", "identity": 5, "at": "x"}).encode()),
    Garbage("infinite fields", (
        b'{"since": 1e999, "capacity": 1e999, "seconds": 1e-300, "at": -1e999, '
        b'"requeued": 1e999, "kind": "window", "queues": ["default"], "delay": 1e999, '
        b'"set": "retry", "payload": "{}", "run_at": 1e999, "class": "ok", "queue": "default"}')),
    Garbage("huge integer fields", (
        f'{{"since": {HUGE_INT}, "capacity": {HUGE_INT}, "seconds": {HUGE_INT}, '
        f'"kind": "bucket", "at": {HUGE_INT}, "run_at": {HUGE_INT}, "pid": {HUGE_INT}, '
        f'"rss": {HUGE_INT}, "lag": {HUGE_INT}}}').encode()),
)


@dataclass(frozen=True, slots=True)
class Spec:
    """A key the project reads: its name, the Redis type it should have, and the field
    (hash) or member a reader looks at."""

    label: str
    kind: RedisType
    name: Callable[[Keys], str]
    fields: tuple[str, ...] = ()


def _metrics_minute(keys: Keys) -> str:
    return keys.run_metrics(minute_of(time.time()))


SPECS: Final[tuple[Spec, ...]] = (
    Spec("queue names", "set", lambda k: k.queues),
    Spec("processes", "set", lambda k: k.processes),
    Spec("alive marker", "string", lambda k: k.process(GHOST)),
    Spec("last beats", "hash", lambda k: k.last_beat, (GHOST,)),
    Spec("beat info", "hash", lambda k: k.beats, (GHOST,)),
    Spec("recoveries", "list", lambda k: k.recoveries),
    Spec("workers hash", "hash", lambda k: k.workers(GHOST), ("some-jid",)),
    Spec("limiter registry", "hash", lambda k: k.limiters, tuple(LIMITERS)),
    Spec("bucket state", "hash", lambda k: k.limiter("lim-bucket", "bucket"),
         ("tokens", "stamp")),
    Spec("window state", "hash", lambda k: k.limiter("lim-window", "window"),
         ("window", "count")),
    Spec("concurrent holders", "zset", lambda k: k.limiter("lim-concurrent", "holders")),
    Spec("run metrics", "hash", _metrics_minute,
         ("ok|runs", "ok|failed", "ok|us", "ok|h3")),
    Spec("stats", "string", lambda k: k.stats_processed),
    Spec("queue", "list", lambda k: k.queue(QUEUE)),
    Spec("schedule", "zset", lambda k: k.schedule(QUEUE)),
    Spec("retry set", "zset", lambda k: k.retry(QUEUE)),
    Spec("dead set", "zset", lambda k: k.dead(QUEUE)),
    Spec("pause flag", "string", lambda k: k.paused(QUEUE)),
    Spec("queue's processes", "set", lambda k: k.queue_identities(QUEUE)),
    Spec("queue's last beats", "hash", lambda k: k.queue_last_beat(QUEUE), (GHOST,)),
    Spec("hand-over list", "list", lambda k: k.unsettled(QUEUE)),
)


def _batch_set(which: str) -> Spec:
    return Spec(f"batch {which} set", "set", lambda k: k.batch_set(BID, which))


WORKFLOW_SPECS: Final[tuple[Spec, ...]] = (
    Spec("batch hash", "hash", lambda k: k.batch(BID),
         ("state", "sealed", "total", "callbacks", "fire", "fired", "holders", "parent",
          "created_at", "finished_at", "description", "leases", "lapsed")),
    *(_batch_set(which) for which in BATCH_SETS),
    Spec("batch index", "zset", lambda k: k.batches),
    Spec("open batch index", "zset", lambda k: k.batches_open),
    Spec("firing set", "zset", lambda k: k.batches_firing),
    Spec("held batch index", "zset", lambda k: k.batches_held),
    Spec("notes lock", "string", lambda k: k.notes_lock),
    Spec("notes", "list", lambda k: k.batch_notes(QUEUE)),
    Spec("watchers", "set", lambda k: k.watchers(QUEUE, PARENT)),
    Spec("waiting copy", "hash", lambda k: k.dep(QUEUE, WAITER),
         ("raw", "tail", "policy", "pass", "parents", "created_at")),
    Spec("waiting's parents", "set", lambda k: k.dep_pending(QUEUE, WAITER)),
    Spec("waiting set", "zset", lambda k: k.waiting(QUEUE)),
    Spec("arming set", "zset", lambda k: k.arming(QUEUE)),
    Spec("group list", "list", lambda k: k.group(QUEUE, GROUP)),
    Spec("group ring", "zset", lambda k: k.groups(QUEUE)),
    Spec("priority list", "list", lambda k: k.priority_level(QUEUE, PRIORITY)),
    Spec("priority levels", "set", lambda k: k.priority_levels(QUEUE)),
    Spec("throttle key", "string", lambda k: k.throttle(QUEUE, DIGEST)),
    Spec("debounce key", "hash", lambda k: k.debounce(QUEUE, DIGEST), ("jid", "raw", "due")),
    Spec("coalesce key", "hash", lambda k: k.coalesce(QUEUE, DIGEST),
         ("jid", "raw", "merge:some-jid")),
    Spec("clear count", "string", lambda k: k.cleared(QUEUE)),
)
"""The keys of workflows and who-runs-next (issue 40): batches, dependencies, groups,
priorities, dedup keys, notes. ``workflow_base`` gives each something to read."""
WORKFLOW_LABELS: Final = frozenset(spec.label for spec in WORKFLOW_SPECS)


@dataclass(frozen=True, slots=True)
class Planting:
    spec: Spec
    garbage: Garbage
    wrong_type: bool = False
    """Another Redis type at the key (``garbage`` is then its content)."""

    @property
    def id(self) -> str:
        how = "another type" if self.wrong_type else "garbage"
        return f"{self.spec.label}: {how}: {self.garbage.name}"


async def plant(store: Store, planting: Planting) -> None:
    """Write ``planting`` over whatever the key holds."""
    spec, value = planting.spec, planting.garbage.value
    key = spec.name(store.keys)
    kind: RedisType = spec.kind
    if planting.wrong_type:
        kind = "list" if spec.kind == "string" else "string"
    client = store.client
    await client.delete(key)
    if kind == "string":
        await client.set(key, value)
    elif kind == "hash":
        await client.hset(key, mapping=dict.fromkeys(spec.fields or ("f",), value))
    elif kind == "list":
        await client.lpush(key, value)
    elif kind == "set":
        await client.sadd(key, value)
    else:
        await client.zadd(key, {value: float("inf"), b"member": float("-inf")})


async def base(store: Store, good_job: bytes) -> None:
    """What the garbage sits beside: a dead process with a job on its list (as its beats
    left it: registered, last seen long ago), and registered limiters."""
    keys = store.keys
    await fetched(store, GHOST, [good_job], QUEUE)
    await store.client.sadd(keys.processes, GHOST)
    await store.client.sadd(keys.queue_identities(QUEUE), GHOST)
    await store.client.hset(keys.last_beat, GHOST, "0")  # long dead, by Redis TIME
    await store.client.hset(keys.queue_last_beat(QUEUE), GHOST, "0")
    await store.client.hset(keys.beats, GHOST, json.dumps(
        {"hostname": "ghost-host", "pid": 7, "queues": [QUEUE]}))
    await store.client.hset(keys.limiters, mapping={
        name: json.dumps({"kind": kind, "capacity": 5, "seconds": 1.0})
        for name, kind in LIMITERS.items()})


def ok_job(jid: str, tag: str, **front: object) -> bytes:
    """A raw ``ok`` job (tests/cli/adminapp.py); ``front``: priority, group — written
    right after the jid, where job.build puts them and the scripts look."""
    return json.dumps({"jid": jid, **front, "class": "ok", "args": [tag], "kwargs": {},
                       "queue": QUEUE, "retry": True, "created_at": time.time(),
                       "enqueued_at": time.time()}).encode()


async def workflow_base(store: Store) -> None:
    """What the workflow keys' garbage sits beside, each key written as the project
    writes it: batch ``BID`` sealed with one member whose end is a note not relayed yet;
    ``WAITER`` waiting for ``PARENT`` (queued, watched: still in the arming set, as if
    its enqueuer died before the last step); a job of priority ``PRIORITY`` and one of
    group ``GROUP``; ``ok``'s throttle window open for ``DEDUP_KEY``."""
    keys = store.keys
    callbacks = json.dumps({"complete": {"name": "ok", "args": ["callback"], "kwargs": {}}})
    await store.batches.open(BID, description="a neighbour", callbacks=callbacks,
                             token="cotenant")
    await store.batches.add(BID, [MEMBER])
    await store.batches.seal(BID, token="cotenant")
    await store.client.rpush(keys.batch_notes(QUEUE), f"{BID}\t{MEMBER}\tsucceeded")
    await store.enqueue(QUEUE, [ok_job(PARENT, "parent")], name="ok")
    parent = Parent(QUEUE, PARENT)
    await store.dependencies.wait(QUEUE, WAITER, ok_job(WAITER, "waiter"), [parent], name="ok")
    await store.dependencies.watch(parent, Watcher(QUEUE, WAITER))
    await store.enqueue(QUEUE, [ok_job("cotenant-prio", "prio", priority=PRIORITY),
                                ok_job("cotenant-grouped", "grouped", group=GROUP)], name="ok")
    await store.client.set(keys.throttle(QUEUE, DIGEST), "cotenant-throttled", ex=3600)


def ghost_job(jid: str) -> bytes:
    """The dead process's job: ``ok`` of tests/cli/adminapp.py, which any worker runs."""
    return make_job(QUEUE, jid=jid, **{"class": "ok", "args": ["ghost"], "kwargs": {}})


def plantings(full: bool) -> list[Planting]:
    """Every key with every garbage value and with another type (full); else every key
    with another type and a few values that broke readers (issue 25), fewer for the
    workflow keys (``SHORT_WORKFLOW_GARBAGE``)."""
    chosen = GARBAGE if full else tuple(g for g in GARBAGE if g.name in SHORT_GARBAGE)
    workflow = GARBAGE if full else tuple(
        g for g in GARBAGE if g.name in SHORT_WORKFLOW_GARBAGE)
    found = [Planting(spec, garbage) for spec in SPECS for garbage in chosen]
    found += [Planting(spec, garbage) for spec in WORKFLOW_SPECS for garbage in workflow]
    found += [Planting(spec, GARBAGE[0], wrong_type=True) for spec in (*SPECS, *WORKFLOW_SPECS)]
    return found


SHORT_GARBAGE: Final = frozenset({"deep JSON list", "not UTF-8", "infinite fields",
                                  "huge integer fields", "infinity"})
SHORT_WORKFLOW_GARBAGE: Final = frozenset({"deep JSON list", "not UTF-8"})


JID: Final = "ghost-job"
"""The dead process's job (its record says running): what ``job`` and the job page show."""


def report(name: str, failures: list[str], checked: int) -> None:
    """Print the check's figures (``make chaos`` collects them), then fail listing every
    planting that failed, not the first."""
    print(f"CHAOS {name} [{'full' if FULL else 'short'}] checked={checked} "
          f"failed={len(failures)}")
    assert not failures, "\n\n".join(failures)


async def fresh(store: Store) -> None:
    """Every key of the namespace gone, then the base state (a dead process with a job)."""
    names = [key async for key in store.client.scan_iter(match=f"{store.keys.namespace}:*",
                                                         count=1000)]
    if names:
        await store.client.delete(*names)
    await base(store, ghost_job(JID))
    await workflow_base(store)


def jobs_on_namespace(redis_url: str, namespace: str,
                      monkeypatch: pytest.MonkeyPatch) -> adminapp.Jobs:
    """The ``jobs`` fixture of the co-tenant checks (as tests/cli/conftest.py's): the CLI's
    App reads the same namespace from the env."""
    monkeypatch.setenv("COGWORKER_REDIS_URL", redis_url)
    monkeypatch.setenv(adminapp.NAMESPACE_ENV, namespace)
    monkeypatch.setenv("COLUMNS", "200")
    return adminapp.build(namespace, redis_url)


async def served_jobs(jobs: adminapp.Jobs) -> AsyncIterator[adminapp.Jobs]:
    """The ``served`` fixture: ``jobs`` for a test in this loop, its App's pool closed after."""
    yield jobs
    await jobs.app.close()


PLANTINGS: Final = plantings(FULL)
"""What the checks plant: short for ``make test``, every planting under ``make chaos``."""
