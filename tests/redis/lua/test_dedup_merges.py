"""debounce.lua and coalesce.lua merge a new job into the key's waiting one by writing the
waiting job's jid where the new payload has its own (``dedup.placed``'s offset), whatever
fields come before it; an offset that does not point at the new jid is refused, nothing
written. A merge into a waiting job is found by the job's record (``merged_by``) and
handed over at its fetch: after a retry or a retry from dead as well, never by scanning
its list (issue 40, 12 and 21); a clear of the queue turns the next enqueue into a new
job."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from redis.exceptions import ResponseError

from cogworker_async.jobs import dedup
from cogworker_async.jobs import wire as job_module
from cogworker_async.redis.admin import Admin
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.moves import Failure
from cogworker_async.redis.store import Store
from tests.redis.lua.helpers import items, scored

QUEUE = "default"


def fronted(value: Any) -> tuple[bytes, str, int]:
    """A raw job whose client middleware wrote a field before the jid, holding a ``jid``
    of its own: (raw, its jid, the bytes before its jid)."""
    payload = job_module.build("note", ["k", value], {}, queue=QUEUE, retry=True,
                               now=time.time())
    jid = payload["jid"]
    raw = json.dumps({"trace": {"jid": "t-" + jid}, **payload},
                     separators=(",", ":")).encode()
    placed, at = dedup.placed(raw, jid)
    return placed, jid, at


def read(raw: bytes) -> tuple[str, Any, str]:
    payload = json.loads(raw)
    return payload["jid"], payload["args"][1], payload["trace"]["jid"]


async def test_debounce_writes_the_waiting_jid_where_the_payload_has_its_own(
    store: Store, keys: Keys
) -> None:
    (first, first_jid, first_at), (second, second_jid, second_at) = fronted(1), fronted(2)
    assert first_at > 8

    await store.dedup.debounce("d", first_jid, 30, QUEUE, first, name="note",
                               jid_at=first_at)
    made, runs = await store.dedup.debounce("d", second_jid, 30, QUEUE, second, name="note",
                                            jid_at=second_at)

    assert (made, runs) == (False, first_jid)
    [(member, _)] = await scored(store, keys.schedule(QUEUE))
    assert read(member) == (first_jid, 2, "t-" + second_jid)


async def test_coalesce_writes_the_waiting_jid_where_the_payload_has_its_own(
    store: Store, keys: Keys
) -> None:
    (first, first_jid, first_at), (second, second_jid, second_at) = fronted(1), fronted(2)

    await store.dedup.coalesce("c", first_jid, QUEUE, first, name="note", jid_at=first_at)
    how, runs = await store.dedup.coalesce("c", second_jid, QUEUE, second, name="note",
                                           jid_at=second_at)

    assert (how, runs) == ("merged", first_jid)
    [(_, fetched)] = (await store.fetch("host:1:me", [QUEUE], 1)).jobs
    assert read(fetched) == (first_jid, 2, "t-" + second_jid)


@pytest.mark.parametrize("mode", ["debounce", "coalesce"])
async def test_an_offset_that_misses_the_jid_is_refused_writing_nothing(
    store: Store, keys: Keys, mode: str
) -> None:
    raw, jid, at = fronted(1)
    with pytest.raises(ResponseError, match="jid is not at byte"):
        await push(store, mode, raw, jid, at - 1)
    assert await scored(store, keys.schedule(QUEUE)) == []
    assert await items(store, keys.queue(QUEUE)) == []


async def push(store: Store, mode: str, raw: bytes, jid: str, at: int) -> object:
    if mode == "debounce":
        return await store.dedup.debounce("d", jid, 30, QUEUE, raw, name="note", jid_at=at)
    return await store.dedup.coalesce("c", jid, QUEUE, raw, name="note", jid_at=at)


def test_placed_finds_the_top_level_jid_not_a_nested_one() -> None:
    raw, jid, at = fronted(1)
    assert raw[at:at + len(jid)] == jid.encode()
    assert json.loads(raw)["trace"]["jid"] == "t-" + jid
    plain = job_module.encode_new(job_module.build("note", [], {}, queue=QUEUE, retry=True,
                                                   now=1.0), job_module.NO_SIZE_LIMIT)
    assert dedup.placed(plain, json.loads(plain)["jid"]) == (plain, 8)
    with pytest.raises(ValueError, match="plain text"):
        dedup.placed(b'{"jid":"a\\"b"}', 'a"b')


# -- issue 40, 12 and 21: merges found by the job's record, never by scanning its list ----

ME = "host:1:me"


def plain(value: Any) -> bytes:
    payload = job_module.build("note", ["k", value], {}, queue=QUEUE, retry=True,
                               now=time.time())
    return job_module.encode_new(payload, job_module.NO_SIZE_LIMIT)


def jid_of(raw: bytes) -> str:
    return str(json.loads(raw)["jid"])


async def coalesce(store: Store, value: Any) -> tuple[str, str]:
    raw = plain(value)
    return await store.dedup.coalesce("c", jid_of(raw), QUEUE, raw, name="note")


async def fail_once(store: Store, target: str) -> bytes:
    """The oldest job runs and fails: filed in ``target`` ("retry" or "dead"), then put
    back on its queue (a retry due, or a retry from dead by hand). Its raw there now."""
    [(_, raw)] = (await store.fetch(ME, [QUEUE], 1)).jobs
    payload = json.loads(raw)
    entry = json.dumps({**payload, "retry_count": 1}, separators=(",", ":")).encode()
    await store.file_failure(ME, QUEUE, raw, target, entry, 0.0,  # type: ignore[arg-type]
                             failure=Failure(payload["jid"], "Boom: once", 2))
    assert await store.promote(QUEUE, target, [(entry, entry)]) == 1  # type: ignore[arg-type]
    return entry


@pytest.mark.parametrize("target", ["retry", "dead"])
async def test_a_merge_reaches_the_job_waiting_again_after_a_retry_or_from_dead(
    store: Store, keys: Keys, target: str
) -> None:
    _, first = await coalesce(store, 1)
    waiting = await fail_once(store, target)

    assert await coalesce(store, 2) == ("merged", first)
    assert await coalesce(store, 3) == ("merged", first)

    assert await items(store, keys.queue(QUEUE)) == [waiting]  # one job of the key waits
    [(_, fetched)] = (await store.fetch(ME, [QUEUE], 1)).jobs
    assert (jid_of(fetched), json.loads(fetched)["args"][1]) == (first, 3)


async def test_the_fetch_spends_the_merge_and_a_given_back_job_keeps_its_arguments(
    store: Store, keys: Keys
) -> None:
    await coalesce(store, 1)
    await coalesce(store, 2)
    [(_, fetched)] = (await store.fetch(ME, [QUEUE], 1)).jobs
    assert sorted(await store.client.hkeys(keys.coalesce(QUEUE, "c"))) == [b"jid", b"raw"]
    assert await store.give_back(ME, QUEUE, fetched)

    [(_, again)] = (await store.fetch(ME, [QUEUE], 1)).jobs

    assert again == fetched
    assert json.loads(again)["args"][1] == 2


async def test_a_merge_never_scans_the_backlog(store: Store, keys: Keys) -> None:
    """The job of the key is the oldest of 50,000: merging into it reads no list (the
    merge is handed over at its fetch), which SLOWLOG would show as a long LPOS."""
    _, first = await coalesce(store, 1)
    filler = plain("filler")
    for _ in range(5):
        await store.client.lpush(keys.queue(QUEUE), *([filler] * 10_000))
    await store.client.config_set("slowlog-log-slower-than", 0)
    try:
        await store.client.slowlog_reset()
        assert await coalesce(store, 2) == ("merged", first)
        commands = {entry["command"].split()[0].upper() for entry in
                    await store.client.slowlog_get(128)}
    finally:
        await store.client.config_set("slowlog-log-slower-than", 10_000)
    assert commands.isdisjoint({b"LPOS", b"LSET", b"LREM", b"LRANGE"}), commands


async def test_a_job_cleared_from_its_queue_takes_no_merge(store: Store, keys: Keys) -> None:
    await coalesce(store, 1)
    await Admin(store).queue_clear(QUEUE)

    how, runs = await coalesce(store, 2)

    assert how == "new"
    [listed] = await items(store, keys.queue(QUEUE))
    assert jid_of(listed) == runs


async def test_a_merge_keeps_the_retry_count_of_the_job_it_reaches(
    store: Store, keys: Keys
) -> None:
    """A retried job takes the new arguments, never a fresh count of retries: enqueues
    at every retry would otherwise keep a failing job retrying for ever."""
    _, first = await coalesce(store, 1)
    await fail_once(store, "retry")
    assert await coalesce(store, 2) == ("merged", first)

    [(_, fetched)] = (await store.fetch(ME, [QUEUE], 1)).jobs

    payload = json.loads(fetched)
    assert (payload["jid"], payload["args"][1], payload["retry_count"]) == (first, 2, 1)
    assert fetched.startswith(b'{"jid":"')
    assert await items(store, keys.in_progress(QUEUE, ME)) == [fetched]


async def test_a_merge_stays_for_its_job_when_a_later_enqueue_follows_it(
    store: Store, keys: Keys
) -> None:
    _, first = await coalesce(store, 1)
    assert await coalesce(store, 2) == ("merged", first)
    grouped = json.loads(plain(3))
    raw = json.dumps({"jid": grouped.pop("jid"), "group": "b", **grouped},
                     separators=(",", ":")).encode()
    how, follow = await store.dedup.coalesce("c", jid_of(raw), QUEUE, raw, name="note")
    assert (how, follow) == ("following", jid_of(raw))

    [(_, fetched)] = (await store.fetch(ME, [QUEUE], 1)).jobs

    assert (jid_of(fetched), json.loads(fetched)["args"][1]) == (first, 2)


async def test_a_merge_that_is_not_the_jobs_own_is_dropped_unrun(
    store: Store, keys: Keys
) -> None:
    """Garbage in the key's state (a co-tenant's) under the job's ``merge:<jid>``: the job
    runs as it was pushed, never as that garbage."""
    raw = plain(1)
    _, first = await store.dedup.coalesce("c", jid_of(raw), QUEUE, raw, name="note")
    state = keys.coalesce(QUEUE, "c")
    await store.client.hset(state, f"merge:{first}", plain(9))  # another jid's job
    [(_, fetched)] = (await store.fetch(ME, [QUEUE], 1)).jobs
    assert fetched == raw
    await store.client.hset(state, f"merge:{first}", b"\xff not a job")
    assert await store.dedup.popped(QUEUE, raw) == raw
    assert not await store.client.hexists(state, f"merge:{first}")


async def test_a_job_put_back_on_its_list_after_a_clear_takes_the_merges(
    store: Store, keys: Keys
) -> None:
    """Retrying while the queue is cleared (its retry is not on the list), then due: it
    is on its list again, after the clear; the next enqueue merges into it."""
    _, first = await coalesce(store, 1)
    [(_, raw)] = (await store.fetch(ME, [QUEUE], 1)).jobs
    payload = json.loads(raw)
    entry = json.dumps({**payload, "retry_count": 1}, separators=(",", ":")).encode()
    await store.file_failure(ME, QUEUE, raw, "retry", entry, 0.0,
                             failure=Failure(first, "Boom: once", 2))
    await Admin(store).queue_clear(QUEUE)
    assert await store.promote(QUEUE, "retry", [(entry, entry)]) == 1

    assert await coalesce(store, 2) == ("merged", first)
    assert await items(store, keys.queue(QUEUE)) == [entry]


# -- a basic-fetch worker pops without a script: one more call, for a coalesced job ------

async def test_a_popped_coalesced_job_takes_its_merge_and_its_key_takes_no_more(
    store: Store, keys: Keys
) -> None:
    _, first = await coalesce(store, 1)
    await fail_once(store, "retry")
    assert await coalesce(store, 2) == ("merged", first)
    popped = await store.client.rpop(keys.queue(QUEUE))
    assert isinstance(popped, bytes)

    runs = await store.dedup.popped(QUEUE, popped)

    payload = json.loads(runs)
    assert (payload["jid"], payload["args"][1], payload["retry_count"]) == (first, 2, 1)
    assert await store.dedup.popped(QUEUE, popped) == popped  # twice: nothing more
    how, runs_next = await coalesce(store, 3)
    assert how == "new"
    assert runs_next != first
    assert [jid_of(raw) for raw in await items(store, keys.queue(QUEUE))] == [runs_next]


async def test_a_popped_job_of_no_coalesced_key_is_run_as_popped(store: Store) -> None:
    raw = plain(1)
    assert await store.dedup.popped(QUEUE, raw) == raw


def test_a_coalesced_payload_is_marked_last_and_its_jid_stays_first() -> None:
    raw = plain(1)
    marked = dedup.mark(raw)
    assert marked.startswith(raw[:-1])
    assert marked.endswith(b',"coalesce":true}')
    assert json.loads(marked)["coalesce"] is True
    assert dedup.mark(b"[1]") == b"[1]"
