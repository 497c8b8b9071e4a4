"""The read/admin model against a real server: what an admin sees is what is stored,
and every action moves exactly the entry that was seen (or reports it gone)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from cogworker_async import App
from cogworker_async.admin import Done, Inspector, JobRecord
from cogworker_async.admin.records import glob_pattern
from cogworker_async.redis.admin import Admin
from cogworker_async.redis.store import Store
from tests.waiting import wait_until


def queued(store: Store, queue: str = "default") -> Any:
    return store.client.lrange(store.keys.queue(queue), 0, -1)


async def test_a_queue_pages_in_run_order_and_reports_the_oldest_jobs_wait(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()

    @jobs.job
    async def work(n: int) -> None: ...

    await work.enqueue_many([((n,), {}) for n in range(60)])
    insp = Inspector(jobs)
    first, third = await insp.queue("default").page(1), await insp.queue("default").page(3)
    assert (first.total, first.pages) == (60, 3)
    assert [r.args[0] for r in first.items] == list(range(25))  # 0 runs next
    assert [r.args[0] for r in third.items] == list(range(50, 60))
    assert [r.position for r in third.items] == list(range(50, 60))
    [info] = await insp.queues.infos()
    assert (info.name, info.size) == ("default", 60)
    assert 0 <= info.latency < 60


async def test_deleting_a_queued_job_finds_it_even_after_the_queue_moved(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.job
    async def work(n: int) -> None: ...

    await work.enqueue_many([((n,), {}) for n in range(10)])
    insp = Inspector(jobs)
    seen = (await insp.queue("default").page()).items[5]
    await store.client.rpop(store.keys.queue("default"))  # a worker took job 0 meanwhile
    await work.enqueue(99)
    done = await insp.queue("default").delete([seen.token])
    assert (done.done, done.missing) == (1, 0)
    left = [json.loads(r)["args"][0] for r in await queued(store)]
    assert 5 not in left
    assert sorted(left) == [1, 2, 3, 4, 6, 7, 8, 9, 99]
    # Deleting it again: gone, and nothing else touched.
    assert (await insp.queue("default").delete([seen.token])).missing == 1
    assert len(await queued(store)) == 9
    # It will never run, and its status says so.
    assert (await jobs.status(seen.jid)).state == "cancelled"


async def test_clearing_a_queue_removes_it_and_its_name(make_app: Callable[..., App]) -> None:
    jobs = make_app()

    @jobs.job
    async def work(n: int) -> None: ...

    await work.enqueue_many([((n,), {}) for n in range(7)])
    insp = Inspector(jobs)
    assert await insp.queue("default").clear() == 7
    assert await insp.queues.infos() == []


async def fill_dead(jobs: App, count: int) -> Inspector:
    @jobs.job(name="fails", retry=1)
    async def fails(n: int) -> None:
        raise ValueError(f"bad <b>{n}</b>")

    await fails.enqueue_many([((n,), {}) for n in range(count)])
    insp = Inspector(jobs)
    async with jobs.worker():
        await wait_until(lambda: _size(insp, "dead", count), timeout=15)
    return insp


async def _size(insp: Inspector, name: str, size: int) -> bool:
    return await insp.job_set(name).size() == size


async def test_a_dead_job_retried_gets_one_more_attempt_and_runs(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    insp = await fill_dead(jobs, 3)
    page = await insp.dead.page()
    assert page.total == 3
    record = page.items[0]
    assert (record.error_class, record.retry_count) == ("ValueError", 1)
    assert record.error_message is not None
    assert "bad <b>" in record.error_message
    done = await insp.dead.retry([record.token])
    assert (done.done, done.missing) == (1, 0)
    [raw] = await queued(store)
    requeued = json.loads(raw)
    assert requeued["jid"] == record.jid
    assert requeued["retry_count"] == 0
    # It runs, fails once more, and (its retries used) lands in dead again — not lost.
    async with jobs.worker():
        await wait_until(lambda: _size(insp, "dead", 3), timeout=10)
    assert await store.client.llen(store.keys.queue("default")) == 0


async def test_actions_on_a_stale_token_report_it_gone_and_touch_nothing_else(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()
    insp = await fill_dead(jobs, 2)
    [first, second] = (await insp.dead.page()).items
    assert (await insp.dead.delete([first.token])).done == 1
    for action in (insp.dead.delete, insp.dead.retry):
        result = await action([first.token])
        assert (result.done, result.missing) == (0, 1)
    assert [r.jid for r in (await insp.dead.page()).items] == [second.jid]
    with pytest.raises(ValueError, match="not an entry token"):
        await insp.dead.delete(["nonsense"])


async def test_scheduled_jobs_can_be_enqueued_now_or_killed(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.job
    async def later(n: int) -> None: ...

    for n in range(3):
        await later.enqueue_in(3600 + n, n)
    insp = Inspector(jobs)
    soonest, second, _ = (await insp.scheduled.page()).items
    assert [soonest.args, second.args] == [[0], [1]]
    assert (await insp.scheduled.retry([soonest.token])).done == 1
    [raw] = await queued(store)
    assert json.loads(raw)["args"] == [0]
    assert "retry_count" not in json.loads(raw)
    assert (await insp.scheduled.kill([second.token])).done == 1
    dead = (await insp.dead.page()).items
    assert [r.args for r in dead] == [[1]]
    assert await insp.scheduled.size() == 1
    # Their records follow: one is queued now, one dead (killed).
    assert (await jobs.status(soonest.jid)).state == "queued"
    assert (await jobs.status(second.jid)).state == "dead"
    [last] = (await insp.scheduled.page()).items
    assert (await insp.scheduled.delete([last.token])).done == 1
    assert (await jobs.status(last.jid)).state == "cancelled"


async def test_search_ignores_case_finds_errors_and_escapes_glob_characters(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()
    insp = await fill_dead(jobs, 5)
    found = await insp.dead.search("VALUEERROR")
    assert found.complete
    assert len(found.items) == 5
    assert [r.args for r in (await insp.dead.search("bad <b>3<")).items] == [[3]]
    assert (await insp.dead.search("*")).items == []  # a literal star, not a wildcard
    limited = await insp.dead.search("fails", limit=2)
    assert len(limited.items) == 2
    assert not limited.complete
    with pytest.raises(ValueError, match="non-empty"):
        await insp.dead.search("  ")


def test_glob_pattern_escapes_every_special_character() -> None:
    assert glob_pattern("a*[b]?") == "*[aA]\\*\\[[bB]\\]\\?*"


async def test_retry_all_moves_every_runnable_entry_and_steps_over_unparseable_ones(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.job
    async def work(n: int) -> None: ...

    now = time.time()
    entries = {json.dumps({"jid": f"j{n}", "class": "work", "args": [n], "queue": "default",
                           "retry_count": 2}): now + n for n in range(1200)}
    entries["not json at all"] = now
    await store.client.zadd(store.keys.retry("default"), entries)
    insp = Inspector(jobs)
    result = await insp.retries.retry_all()
    assert result.done == 1200
    assert len(result.refused) == 1
    assert await store.client.llen(store.keys.queue("default")) == 1200
    assert await store.client.zrange(store.keys.retry("default"), 0, -1) == [b"not json at all"]
    assert json.loads((await queued(store))[0])["retry_count"] == 1
    assert await insp.retries.delete_all() == 1


async def test_kill_all_moves_retries_to_dead(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    entries = {json.dumps({"jid": f"j{n}", "class": "x", "args": []}): n for n in range(30)}
    await store.client.zadd(store.keys.retry("default"), entries)
    insp = Inspector(jobs)
    assert (await insp.retries.kill_all()).done == 30
    assert (await insp.retries.size(), await insp.dead.size()) == (0, 30)
    assert (await insp.dead.kill_all()).done == 0


async def test_pages_refuse_bad_numbers(make_app: Callable[..., App]) -> None:
    insp = Inspector(make_app())
    for number, size in ((0, 25), (1, 0), (1, 10_000)):
        with pytest.raises(ValueError, match="page"):
            await insp.dead.page(number, size)


async def test_processes_show_a_live_worker_and_its_running_job(
    make_app: Callable[..., App],
) -> None:
    jobs = make_app()
    started, release = [], []

    @jobs.job(name="slow")
    async def slow() -> None:
        started.append(1)
        await wait_until(lambda: bool(release), timeout=10)

    await slow.enqueue()
    insp = Inspector(jobs)

    async def shows_running() -> bool:
        procs = await insp.processes.all()
        return bool(procs) and bool(procs[0].running)

    async with jobs.worker(concurrency=3):
        await wait_until(shows_running, timeout=10)
        [proc] = await insp.processes.all()
        assert proc.alive
        assert not proc.awaiting_recovery
        assert proc.concurrency == 3
        assert proc.pid is not None
        assert proc.hostname
        assert proc.beat_age is not None
        assert proc.beat_age < 5
        assert [r.name for r in proc.running] == ["slow"]
        summary = await insp.summary()
        assert (summary["processes"], summary["busy"]) == (1, 1)
        release.append(1)
    assert await insp.processes.all() == []  # a clean stop leaves no trace


async def test_a_process_that_stopped_beating_awaits_recovery(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    identity = "gone-host:4242:abc"
    for queue in ("default", "mail"):  # its jobs on each queue it served are counted
        await store.client.rpush(store.keys.in_progress(queue, identity),
                                 b'{"jid":"j","class":"x"}')
    await store.client.sadd(store.keys.processes, identity)
    await store.client.hset(store.keys.last_beat, identity, time.time() - 30)
    await store.client.hset(store.keys.beats, identity, json.dumps(
        {"hostname": "gone-host", "pid": 4242, "queues": ["default", "mail"]}))
    [proc] = await Inspector(jobs).processes.all()
    assert not proc.alive
    assert proc.awaiting_recovery
    assert proc.in_progress == 2
    assert proc.beat_age is not None
    assert proc.beat_age >= 29


async def test_periodic_jobs_show_schedule_next_and_last_run(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.periodic("*/5 * * * *", name="report", queue="reports")
    async def report() -> None: ...

    # Its claims and running lock are in the slot of its queue.
    await store.client.hset(store.keys.cron_claimed("reports"), "report", 1_700_000_000)
    [info] = await Inspector(jobs).periodic.all()
    assert (info.name, info.schedule, info.queue, info.last_run, info.running) == (
        "report", "*/5 * * * *", "reports", 1_700_000_000.0, False)
    await store.client.set(store.keys.periodic_running("reports", "report"), "a-jid")
    [info] = await Inspector(jobs).periodic.all()
    assert info.running
    assert info.next_run > time.time()
    assert info.next_run % 300 == 0


async def test_the_apps_periodic_jobs_are_the_admin_models_as_the_documented_dicts(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.periodic("*/5 * * * *", name="report", tz="Europe/Paris")
    async def report() -> None: ...

    @jobs.periodic("0 * * * *", name="never-ran")
    async def hourly() -> None: ...

    await store.client.hset(store.keys.cron_claimed("default"), "report", 1_700_000_000)
    listed = {entry["name"]: entry for entry in await jobs.periodic_jobs()}
    assert set(listed) == {"report", "never-ran"}
    assert all(set(entry) == {"name", "schedule", "tz", "next_run", "last_run"}
               for entry in listed.values())
    report_entry, hourly_entry = listed["report"], listed["never-ran"]
    assert (report_entry["schedule"], report_entry["tz"], report_entry["last_run"]) == (
        "*/5 * * * *", "Europe/Paris", 1_700_000_000.0)
    assert (hourly_entry["tz"], hourly_entry["last_run"]) == ("UTC", None)
    assert report_entry["next_run"] > time.time()
    assert report_entry["next_run"] % 300 == 0


def test_a_record_that_is_not_json_is_shown_not_run() -> None:
    record = JobRecord.read(b"\xff\xfe<script>", score=1.0)
    assert record.payload is None
    assert not record.runnable
    assert record.name == "?"
    assert "<script>" in record.display_args()
    assert "raw_base64" in record.as_dict()


@pytest.mark.timeout(20)  # without the fix, retry_all tried the stuck entry forever
async def test_retry_all_steps_over_an_entry_whose_queue_cannot_be_written(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    await store.register_queues(["blocked"])
    await store.client.set(store.keys.queue("blocked"), "a string, not a list")
    stuck = json.dumps({"jid": "stuck", "class": "work", "args": [], "queue": "blocked"})
    movable = json.dumps({"jid": "fine", "class": "work", "args": [], "queue": "default"})
    await store.client.zadd(store.keys.retry("blocked"), {stuck: 1.0})
    await store.client.zadd(store.keys.retry("default"), {movable: 2.0})
    insp = Inspector(jobs)
    result = await insp.retries.retry_all()
    assert (result.done, result.missing) == (1, 0)
    [reason] = result.refused
    assert "cannot be written" in reason
    assert await store.client.zrange(store.keys.retry("blocked"), 0, -1) == [stuck.encode()]
    assert [json.loads(r)["jid"] for r in await queued(store)] == ["fine"]
    # One by one too: the entry is reported left in place, not gone.
    [record] = (await insp.retries.page()).items
    single = await insp.retries.retry([record.token])
    assert (single.done, single.missing, len(single.refused)) == (0, 0, 1)


async def test_an_entry_holding_nan_is_left_alone_and_the_rest_are_retried(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    # Python's JSON reads NaN, but a job may not carry it: it cannot be pushed again.
    odd = '{"jid": "odd", "class": "work", "args": [NaN], "queue": "default"}'
    entries = {odd: 1.0, json.dumps({"jid": "fine", "class": "work", "args": [1]}): 2.0}
    await store.client.zadd(store.keys.dead("default"), entries)
    insp = Inspector(jobs)
    record = next(r for r in (await insp.dead.page()).items if r.jid == "odd")
    assert not record.runnable
    assert len((await insp.dead.retry([record.token])).refused) == 1
    result = await insp.dead.retry_all()
    assert (result.done, len(result.refused)) == (1, 1)
    assert await store.client.zrange(store.keys.dead("default"), 0, -1) == [odd.encode()]
    assert [json.loads(r)["jid"] for r in await queued(store)] == ["fine"]


@pytest.mark.timeout(20)  # without the fix, the loop kept retrying what came back
async def test_retry_all_does_not_retry_again_a_job_that_failed_again_meanwhile(
    make_app: Callable[..., App], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = make_app()
    entries = {json.dumps({"jid": f"j{n}", "class": "work", "args": [n]}): n
               for n in range(3)}
    await store.client.zadd(store.keys.retry("default"), entries)
    insp = Inspector(jobs)
    promote = Admin.set_to_queues
    runs: list[str] = []

    async def fails_at_once(admin: Admin, target: Any, items: Any) -> int:
        # A worker that runs each retried job at once and files it back in retry (new
        # bytes: one more failure), due before the entries the bulk action has not
        # reached yet.
        moved = await promote(admin, target, items)
        for _, _, queue in items:
            pushed = await store.client.rpop(store.keys.queue(queue))
            assert isinstance(pushed, bytes)
            payload = json.loads(pushed)
            runs.append(payload["jid"])
            payload["retry_count"] = payload.get("retry_count", -1) + 1
            await store.client.zadd(store.keys.retry(queue), {json.dumps(payload): -len(runs)})
        return moved

    monkeypatch.setattr(Admin, "set_to_queues", fails_at_once)
    monkeypatch.setattr("cogworker_async.admin.sets.BULK_BATCH", 1)
    result = await insp.retries.retry_all()
    assert result.done == 3
    assert sorted(runs) == ["j0", "j1", "j2"]  # each retried (and run) once
    assert await insp.retries.size() == 3


async def test_finding_a_token_among_many_entries_sharing_its_score_reads_in_batches(
    make_app: Callable[..., App], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = make_app()
    due = time.time() + 3600  # a batch scheduled for one time: one score for them all
    entries = {json.dumps({"jid": f"j{n:05}", "class": "work", "args": [n]}): due
               for n in range(2500)}
    await store.client.zadd(store.keys.schedule("default"), entries)
    insp = Inspector(jobs)
    last = (await insp.scheduled.page(100)).items[-1]  # the 2,500th
    read = Admin.set_at_score
    replies: list[int] = []

    async def counted(admin: Admin, *args: Any) -> dict[str, list[bytes]]:
        reply = await read(admin, *args)
        replies.extend(len(batch) for batch in reply.values())
        return reply

    monkeypatch.setattr(Admin, "set_at_score", counted)
    found = await insp.scheduled.find(last.token)
    assert found is not None
    assert found.jid == last.jid
    assert max(replies) <= 1000  # never the whole set at once
    assert (await insp.scheduled.delete([last.token])).done == 1
    assert await insp.scheduled.size() == 2499


@pytest.mark.parametrize("action", ["delete queued", "delete scheduled", "kill scheduled"])
async def test_a_unique_job_deleted_or_killed_by_an_admin_can_be_enqueued_again(
    make_app: Callable[..., App], action: str
) -> None:
    jobs = make_app()

    @jobs.job(unique=True, unique_ttl=3600)
    async def report(day: str) -> None: ...

    insp = Inspector(jobs)
    if action == "delete queued":
        assert await report.enqueue("2030-01-01") is not None
        [record] = (await insp.queue("default").page()).items
        assert (await insp.queue("default").delete([record.token])).done == 1
    else:
        assert await report.enqueue_in(600, "2030-01-01") is not None
        [record] = (await insp.scheduled.page()).items
        act = insp.scheduled.delete if action == "delete scheduled" else insp.scheduled.kill
        assert (await act([record.token])).done == 1
    # Its lock went with it: the same job is not refused as a duplicate of nothing.
    assert await report.enqueue("2030-01-01") is not None


async def test_a_token_named_twice_acts_on_one_entry(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    twin = json.dumps({"jid": "twin", "class": "work", "args": []})
    await store.client.lpush(store.keys.queue("default"), twin, twin)  # pushed twice
    insp = Inspector(jobs)
    token = (await insp.queue("default").page()).items[0].token
    assert (await insp.queue("default").delete([token, token])) == Done(1, 0)
    assert await queued(store) == [twin.encode()]
    await store.client.zadd(store.keys.dead("default"), {twin: 1.0})
    [record] = (await insp.dead.page()).items
    assert await insp.dead.delete([record.token, record.token]) == Done(1, 0)


async def test_a_dead_unique_job_retried_by_hand_holds_its_lock_again(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.job(name="report", unique=True, unique_ttl=3600, retry=False)
    async def report(day: str) -> None:
        raise ValueError("not yet")

    assert await report.enqueue("2030-01-01") is not None
    insp = Inspector(jobs)
    async with jobs.worker():
        await wait_until(lambda: _size(insp, "dead", 1), timeout=10)
    # Dead released the lock: the same job could be enqueued again now...
    [record] = (await insp.dead.page()).items
    assert (await insp.dead.retry([record.token])).done == 1
    # ...but once the dead one is back on its queue, a second copy is a duplicate.
    assert await report.enqueue("2030-01-01") is None
    assert await store.client.llen(store.keys.queue("default")) == 1
    [digest_key] = await store.client.keys(store.keys.unique("default", "*"))
    assert await store.client.get(digest_key) == record.jid.encode()


async def test_history_counts_per_day_what_workers_did(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.job(name="half", retry=False)
    async def half(n: int) -> None:
        if n % 2:
            raise ValueError("odd")

    await half.enqueue_many([((n,), {}) for n in range(10)])
    insp = Inspector(jobs)

    async def flushed() -> bool:
        totals = await insp.stats.totals()
        return (totals.processed, totals.failed) == (10, 5)

    async with jobs.worker():
        await wait_until(flushed, timeout=10)
    history = await insp.stats.history(2)
    assert [day.day for day in history] == sorted(day.day for day in history)
    # Summed: a run across midnight UTC splits the counts between two days.
    assert (sum(d.processed for d in history), sum(d.failed for d in history)) == (10, 5)
    ttl = await store.client.ttl(store.keys.stats_processed_on(history[-1].day))
    assert ttl > 300 * 24 * 3600  # kept about a year
    with pytest.raises(ValueError, match=r"1\.\.366"):
        await insp.stats.history(0)
