"""The dedup modes' scripts: enqueue_unique.lua as a throttle's window (its record names
no lock), debounce.lua (a waiting job moved, replaced before removed, its jid kept; a job
no longer waiting, or cancelled, makes room for a new one) and coalesce.lua (merge into
the job on its list or its copy, one follow-up of a running job watched in the same step,
a new job after an end)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from cogworker_async.errors import WrongTypeKey
from cogworker_async.jobs import wire as job_module
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import items, redis_now, scored, stored_record

QUEUE = "default"
ME = "host:1:me"


def raw_of(value: Any, **options: Any) -> bytes:
    payload = job_module.build("note", ["k", value], {}, queue=QUEUE, retry=True,
                               now=time.time(), **options)
    return job_module.encode_new(payload, job_module.NO_SIZE_LIMIT)


def jid(raw: bytes) -> str:
    return str(json.loads(raw)["jid"])


def value(raw: bytes) -> Any:
    return json.loads(raw)["args"][1]


async def test_a_throttle_window_refuses_and_its_record_names_no_lock(
    store: Store, keys: Keys
) -> None:
    first, second = raw_of(1), raw_of(2)
    assert await store.dedup.throttle("d", jid(first), 60, QUEUE, first, at=None, delay=None,
                                      name="note")
    assert not await store.dedup.throttle("d", jid(second), 60, QUEUE, second, at=None,
                                          delay=None, name="note")

    assert await items(store, keys.queue(QUEUE)) == [first]
    assert await store.client.get(keys.throttle(QUEUE, "d")) == jid(first).encode()
    assert 0 < await store.client.pttl(keys.throttle(QUEUE, "d")) <= 60_000
    assert "lock" not in await stored_record(store.client, keys, QUEUE, jid(first))


async def test_debounce_moves_the_waiting_job_with_the_new_arguments_keeping_its_jid(
    store: Store, keys: Keys
) -> None:
    first, second = raw_of(1), raw_of(2)
    made, kept = await store.dedup.debounce("d", jid(first), 30, QUEUE, first, name="note")
    before = await redis_now(store)
    again, moved = await store.dedup.debounce("d", jid(second), 60, QUEUE, second, name="note")

    assert (made, kept, again, moved) == (True, jid(first), False, jid(first))
    [(member, due)] = await scored(store, keys.schedule(QUEUE))
    assert (jid(member), value(member)) == (jid(first), 2)
    assert before + 59 <= due <= before + 61
    fields = await stored_record(store.client, keys, QUEUE, jid(first))
    assert fields["state"] == "scheduled"


async def test_debounce_makes_a_new_job_once_the_waiting_one_is_gone_or_cancelled(
    store: Store, keys: Keys
) -> None:
    first, second, third = raw_of(1), raw_of(2), raw_of(3)
    await store.dedup.debounce("d", jid(first), 30, QUEUE, first, name="note")
    await store.client.zrem(keys.schedule(QUEUE), first)  # promoted meanwhile
    made, runs = await store.dedup.debounce("d", jid(second), 30, QUEUE, second, name="note")
    assert (made, runs) == (True, jid(second))
    assert await store.cancel_job(QUEUE, jid(second)) is not None  # a cancel waits on it

    made, runs = await store.dedup.debounce("d", jid(third), 30, QUEUE, third, name="note")

    assert (made, runs) == (True, jid(third))


async def test_coalesce_merges_into_the_job_on_its_list_at_its_fetch_keeping_its_place(
    store: Store, keys: Keys
) -> None:
    before = raw_of("before", group="acme")
    await store.enqueue(QUEUE, [before])
    first, second = raw_of(1, group="acme"), raw_of(2, group="acme")
    assert await store.dedup.coalesce("c", jid(first), QUEUE, first, name="note") == (
        "new", jid(first))
    after = raw_of("after", group="acme")
    await store.enqueue(QUEUE, [after])

    how, runs = await store.dedup.coalesce("c", jid(second), QUEUE, second, name="note")

    assert (how, runs) == ("merged", jid(first))
    listed = await items(store, keys.group(QUEUE, "acme"))
    assert listed == [after, first, before]  # not scanned for, not moved: its place kept
    fetched = [raw for _, raw in (await store.fetch(ME, [QUEUE], 3)).jobs]
    assert [(jid(raw), value(raw)) for raw in fetched] == [
        (jid(before), "before"), (jid(first), 2), (jid(after), "after")]
    # where it now is (what recovery would find) holds the merged arguments too
    assert fetched[1] in await items(store, keys.in_progress(QUEUE, ME))


async def test_coalesce_keeps_one_follow_up_of_a_running_job_watched_in_the_same_step(
    store: Store, keys: Keys
) -> None:
    first = raw_of(1)
    await store.dedup.coalesce("c", jid(first), QUEUE, first, name="note")
    assert (await store.fetch(ME, [QUEUE], 1)).jobs  # it runs
    second, third = raw_of(2), raw_of(3)

    how, follow = await store.dedup.coalesce("c", jid(second), QUEUE, second, name="note")
    again, merged = await store.dedup.coalesce("c", jid(third), QUEUE, third, name="note")

    assert (how, follow, again, merged) == ("following", jid(second), "merged", jid(second))
    parent = await stored_record(store.client, keys, QUEUE, jid(first))
    assert parent["watchers"] == f"{QUEUE}/{jid(second)}"
    copy = await store.client.hgetall(keys.dep(QUEUE, jid(second)))
    assert value(copy[b"raw"]) == 3
    assert copy[b"policy"] == b"run"
    assert await store.client.zscore(keys.waiting(QUEUE), jid(second)) is not None
    assert await store.client.zscore(keys.arming(QUEUE), jid(second)) is None  # watched
    fields = await stored_record(store.client, keys, QUEUE, jid(second))
    assert fields["state"] == "waiting"


async def test_coalesce_makes_a_new_job_after_its_latest_ended(
    store: Store, keys: Keys
) -> None:
    first = raw_of(1)
    await store.dedup.coalesce("c", jid(first), QUEUE, first, name="note")
    [(_, fetched)] = (await store.fetch(ME, [QUEUE], 1)).jobs
    assert await store.ack(ME, QUEUE, [(fetched, jid(fetched))]) == 1
    second = raw_of(2)

    assert await store.dedup.coalesce("c", jid(second), QUEUE, second, name="note") == (
        "new", jid(second))
    assert await items(store, keys.queue(QUEUE)) == [second]


async def test_new_arguments_of_another_group_follow_the_waiting_job(
    store: Store, keys: Keys
) -> None:
    """A list never holds a job of another's: the job keeps its group, the new arguments
    run after it as its follow-up."""
    first, second = raw_of(1, group="acme"), raw_of(2, group="zeta")
    await store.dedup.coalesce("c", jid(first), QUEUE, first, name="note")

    assert await store.dedup.coalesce("c", jid(second), QUEUE, second, name="note") == (
        "following", jid(second))
    [waiting] = await items(store, keys.group(QUEUE, "acme"))
    assert (jid(waiting), value(waiting)) == (jid(first), 1)
    assert await items(store, keys.group(QUEUE, "zeta")) == []
    copy = await store.client.hgetall(keys.dep(QUEUE, jid(second)))
    assert value(copy[b"raw"]) == 2


# -- a co-tenant's key of another type: refused naming it, before anything is written --

FOREIGN: dict[str, tuple[str, Callable[[Keys], str]]] = {
    "debounce key": ("debounce", lambda k: k.debounce(QUEUE, "d")),
    "schedule": ("debounce", lambda k: k.schedule(QUEUE)),
    "coalesce key": ("coalesce", lambda k: k.coalesce(QUEUE, "d")),
    "queue": ("coalesce", lambda k: k.queue(QUEUE)),
    "clear count": ("coalesce", lambda k: k.cleared(QUEUE)),
}
"""Each key a debounce or a coalesce writes (or reads to decide: the clear count)."""


async def dumps(store: Store, keys: Keys, but: str) -> dict[str, object]:
    """Every key of the namespace but ``but`` and the set of queue names (the enqueue
    registers its queue's name first, as every enqueue does: a name, no job), as DUMP
    gives it."""
    names = [k.decode() if isinstance(k, bytes) else k
             for k in await store.client.keys(f"{keys.namespace}*")]
    return {k: await store.client.dump(k) for k in names if k not in (but, keys.queues)}


async def dedup_call(store: Store, mode: str, raw: bytes) -> object:
    if mode == "debounce":
        return await store.dedup.debounce("d", jid(raw), 30, QUEUE, raw, name="note")
    return await store.dedup.coalesce("d", jid(raw), QUEUE, raw, name="note")


@pytest.mark.parametrize("what", sorted(FOREIGN))
@pytest.mark.parametrize("first", [False, True], ids=["new", "merge"])
async def test_a_dedup_key_of_another_type_is_refused_naming_it_before_any_write(
    store: Store, keys: Keys, what: str, first: bool,
) -> None:
    mode, name = FOREIGN[what]
    key = name(keys)
    if first and what not in ("debounce key", "coalesce key"):
        await dedup_call(store, mode, raw_of(1))  # a job of the key waits: a merge
    before = await dumps(store, keys, but=key)
    await store.client.delete(key)
    await store.client.sadd(key, "a co-tenant's")
    with pytest.raises(WrongTypeKey, match=f"{what} .*is not a") as refused:
        await dedup_call(store, mode, raw_of(2))
    assert refused.value.key == key
    assert await dumps(store, keys, but=key) == before


@pytest.mark.parametrize("what", ["waiting set", "waiting copy", "waiting's parents"])
async def test_a_coalesce_follow_up_meeting_a_key_of_another_type_writes_nothing(
    store: Store, keys: Keys, what: str,
) -> None:
    first, second = raw_of(1), raw_of(2)
    await store.dedup.coalesce("c", jid(first), QUEUE, first, name="note")
    assert (await store.fetch(ME, [QUEUE], 1)).jobs  # it runs: the next one follows it
    key = {"waiting set": keys.waiting(QUEUE), "waiting copy": keys.dep(QUEUE, jid(second)),
           "waiting's parents": keys.dep_pending(QUEUE, jid(second))}[what]
    before = await dumps(store, keys, but=key)
    await store.client.set(key, "a co-tenant's")
    with pytest.raises(WrongTypeKey, match=f"{what} .*is not a") as refused:
        await store.dedup.coalesce("c", jid(second), QUEUE, second, name="note")
    assert refused.value.key == key
    assert await dumps(store, keys, but=key) == before
