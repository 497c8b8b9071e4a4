"""The probe's holes in jobs as values (issue 25, items 1-4 and 17): a chosen jid alive
twice, a cancelled unique job keeping its lock, URL options overriding the client's own
settings, results that JSON would change, and the testing helpers reaching for a real
server or skipping the result checks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cogworker_async import App, ConfigurationError, JobFailed, ResultNotJSON
from cogworker_async.admin import Inspector
from cogworker_async.redis.store import Store
from tests.waiting import wait_until

# -- 1. one jid, one live job ------------------------------------------------------------


async def test_a_chosen_jid_alive_in_one_queue_is_refused_in_another(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()

    @jobs.job(name="charge")
    async def charge(order: int) -> None: ...

    assert await charge.options(jid="order-42", queue="payments").enqueue(1) == "order-42"
    # Enqueued again after a connection error, onto another queue by mistake: refused.
    assert await charge.options(jid="order-42", queue="default").enqueue(1) is None
    assert await charge.options(jid="order-42", queue="default").enqueue_in(60, 1) is None
    assert await store.client.llen(store.keys.queue("default")) == 0
    assert await store.client.zcard(store.keys.schedule("default")) == 0
    # So a cancel stops the one copy there is.
    assert await jobs.cancel("order-42") == "cancelled"
    assert (await jobs.status("order-42")).state == "cancelled"
    # Its copy waits on "payments" to be dropped unrun: until then the jid is not free
    # in any queue (as in its own: enqueue.lua).
    assert await charge.options(jid="order-42", queue="default").enqueue(1) is None


async def test_a_dead_copy_is_not_retried_by_hand_while_its_jid_lives_again(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    fail = {"now": True}

    @jobs.job(name="charge", retry=False)
    async def charge(order: int) -> None:
        if fail["now"]:
            raise ValueError("card declined")

    insp = Inspector(jobs)
    assert await charge.options(jid="order-7").enqueue(1) == "order-7"
    async with jobs.worker():
        await wait_until(lambda: _dead(insp, 1), timeout=10)
    # Enqueued anew with its jid (the documented way), in this queue and in another.
    assert await charge.options(jid="order-7").enqueue_in(600, 1) == "order-7"
    [dead] = (await insp.dead.page()).items
    done = await insp.dead.retry([dead.token])
    assert done.done == 0
    assert "alive again" in " ".join(done.refused)
    assert await insp.dead.size() == 1  # still there, for later
    assert await store.client.llen(store.keys.queue("default")) == 0

    await _delete_scheduled(insp)
    assert await charge.options(jid="order-7", queue="other").enqueue_in(600, 1) == "order-7"
    done = await insp.dead.retry([dead.token])
    assert done.done == 0
    assert "alive again in queue 'other'" in " ".join(done.refused)
    assert await store.client.llen(store.keys.queue("default")) == 0

    # With no live copy left, the retry by hand goes through, and runs it once.
    await _delete_scheduled(insp)
    assert (await insp.dead.retry([dead.token])).done == 1
    fail["now"] = False
    async with jobs.worker():
        await wait_until(lambda: _state(jobs, "order-7", "succeeded", "default"),
                         timeout=10)


async def _delete_scheduled(insp: Inspector) -> None:
    [scheduled] = (await insp.scheduled.page()).items
    assert (await insp.scheduled.delete([scheduled.token])).done == 1


async def _dead(insp: Inspector, size: int) -> bool:
    return await insp.dead.size() == size


async def _state(jobs: App, jid: str, state: str, queue: str | None = None) -> bool:
    return (await jobs.status(jid, queue=queue)).state == state


def test_the_fake_refuses_a_chosen_jid_alive_in_another_queue(tmp_path: Path) -> None:
    jobs = App("redis://127.0.0.1:1/0", namespace="fake", data_dir=str(tmp_path))

    @jobs.job(name="charge")
    async def charge(order: int) -> None: ...

    with jobs.testing.fake():
        assert charge.options(jid="o-1", queue="payments").enqueue_sync(1) == "o-1"
        assert charge.options(jid="o-1", queue="default").enqueue_sync(1) is None
        assert [e.queue for e in jobs.testing.enqueued()] == ["payments"]


# -- 2. a cancelled unique job releases its lock ------------------------------------------


@pytest.mark.parametrize("state", ["queued", "scheduled", "retrying"])
async def test_a_cancelled_unique_job_can_be_enqueued_again(
    make_app: Callable[..., App], store: Store, state: str
) -> None:
    jobs = make_app(retry_base_delay=600.0)

    @jobs.job(name="report", unique=True, unique_ttl=3600, retry=3)
    async def report(day: str) -> None:
        raise ValueError("not yet")

    if state == "scheduled":
        jid = await report.enqueue_in(600, "2030-01-01")
    else:
        jid = await report.enqueue("2030-01-01")
    assert jid is not None
    if state == "retrying":
        async with jobs.worker():
            await wait_until(lambda: _state(jobs, jid, "retrying"), timeout=10)
    assert await report.enqueue("2030-01-01") is None  # the lock holds while it waits

    assert await jobs.cancel(jid) == "cancelled"

    again = await report.enqueue("2030-01-01")
    assert again is not None
    assert again != jid
    # The new copy's lock is its own: a second cancel of the old jid does not free it.
    assert await jobs.cancel(jid) == "cancelled"
    assert await report.enqueue("2030-01-01") is None


async def test_the_fake_releases_a_cancelled_unique_job_s_lock(tmp_path: Path) -> None:
    jobs = App("redis://127.0.0.1:1/0", namespace="fake", data_dir=str(tmp_path))

    @jobs.job(name="report", unique=True, unique_ttl=3600)
    async def report(day: str) -> None: ...

    async with jobs.testing.fake():
        jid = await report.enqueue("monday")
        assert jid is not None
        assert await report.enqueue("monday") is None
        assert await jobs.cancel(jid) == "cancelled"
        assert await report.enqueue("monday") is not None


# -- 3. a URL's query never overrides the client's own settings ---------------------------


@pytest.mark.parametrize("query", ["decode_responses=true", "socket_timeout=0.001",
                                   "retry_on_timeout=true", "protocol=2"])
def test_url_options_that_would_change_the_client_are_refused(
    redis_url: str, query: str
) -> None:
    url = f"{redis_url}?{query}"
    with pytest.raises(ConfigurationError, match=f"unknown option {query.split('=')[0]!r}"):
        App(url, namespace="x").redis_url()
    with pytest.raises(ConfigurationError, match="unknown option"):
        Store.from_url(url, "x")


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/abc", "redis://127.0.0.1/1x",
                                 "redis://127.0.0.1:6379/0?db=one", "unix:///tmp/r.sock?db=x"])
def test_a_database_that_is_not_a_number_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError, match="the database must be a number"):
        App(url, namespace="x").redis_url()


async def test_allowed_url_options_still_connect(redis_url: str, namespace: str) -> None:
    jobs = App(f"{redis_url}?client_name=probe", namespace=namespace)
    try:
        store = jobs._store()
        assert await store.client.ping()
    finally:
        await jobs.close()


# -- 4. results come back exactly, or the job is dead with the reason --------------------

LOSSY_RESULTS: list[tuple[str, Any]] = [
    ("int and str keys that collapse", {1: "a", "1": "b"}),
    ("a tuple", (1, 2)),
    ("a nested tuple", {"pair": (1, 2)}),
]


@pytest.mark.parametrize(("what", "value"), LOSSY_RESULTS, ids=[w for w, _ in LOSSY_RESULTS])
async def test_a_result_json_would_change_sends_the_job_to_dead_with_the_reason(
    make_app: Callable[..., App], what: str, value: Any
) -> None:
    jobs = make_app()

    @jobs.job(name="compute", keep_result=60)
    async def compute() -> Any:
        return value

    jid = await compute.enqueue()
    assert jid is not None
    async with jobs.worker():
        with pytest.raises(JobFailed, match=r"ResultNotJSON.*unchanged"):
            await jobs.result(jid, timeout=10)


@pytest.mark.parametrize(("what", "value"), LOSSY_RESULTS, ids=[w for w, _ in LOSSY_RESULTS])
async def test_the_testing_helpers_check_results_as_a_worker_does(
    tmp_path: Path, what: str, value: Any
) -> None:
    jobs = App("redis://127.0.0.1:1/0", namespace="fake", data_dir=str(tmp_path))

    @jobs.job(name="compute", keep_result=60)
    async def compute() -> Any:
        return value

    with jobs.testing.inline(), pytest.raises(ResultNotJSON, match="unchanged"):
        await compute.enqueue()
    with jobs.testing.fake():
        await compute.enqueue()
        [run] = await jobs.testing.drain()
        assert run.outcome == "dead"
        assert isinstance(run.error, ResultNotJSON)


async def test_a_result_that_json_keeps_is_still_kept(make_app: Callable[..., App]) -> None:
    jobs = make_app()

    @jobs.job(name="compute", keep_result=60)
    async def compute() -> Any:
        return {"n": [1, 2.5, None, True, "x"]}

    jid = await compute.enqueue()
    assert jid is not None
    async with jobs.worker():
        assert await jobs.result(jid, timeout=10) == {"n": [1, 2.5, None, True, "x"]}


# -- 17. inside fake(), jobs-as-values answer from the fake, with no server ---------------


async def test_status_result_and_cancel_inside_a_fake_never_start_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COGWORKER_REDIS_URL", raising=False)
    jobs = App(namespace="fake", data_dir=str(tmp_path))  # no URL: the embedded server

    @jobs.job(name="compute", keep_result=60)
    async def compute(n: int) -> int:
        return n * 2

    async with jobs.testing.fake():
        jid = await compute.enqueue(21)
        later = await compute.enqueue_in(600, 1)
        assert jid is not None
        assert later is not None
        assert (await jobs.status(jid)).state == "queued"
        with pytest.raises(TimeoutError, match="drain"):
            await jobs.result(jid)
        assert await jobs.cancel(later) == "cancelled"
        await jobs.testing.drain(include_scheduled=True)
        assert (await jobs.status(jid)).state == "succeeded"
        assert await jobs.result(jid) == 42
        assert (await jobs.status(later)).state == "cancelled"
        assert await jobs.cancel(jid) == "finished"
        assert (await jobs.status("nobody")).state == "unknown"
    assert jobs._embedded is None  # no server was started for any of it
    assert list(tmp_path.iterdir()) == []
