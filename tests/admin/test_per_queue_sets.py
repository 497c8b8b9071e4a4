"""The schedule, retry and dead sets are one per queue (each in its queue's hash slot),
and an admin sees each kind as one set: one count, one page merged by score, one search,
and every action taken in the set of the queue that holds the entry."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from cogworker_async import App
from cogworker_async.admin import Inspector
from cogworker_async.redis.admin import Admin
from cogworker_async.redis.keys import Keys
from cogworker_async.redis.store import Store
from tests.waiting import wait_until


def entry(jid: str, queue: str | None, **fields: Any) -> str:
    payload: dict[str, Any] = {"jid": jid, "class": "work", "args": [jid], **fields}
    if queue is not None:
        payload["queue"] = queue
    return json.dumps(payload)


async def test_dead_jobs_of_two_queues_are_one_page_by_time_of_death_and_retried_home(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app(queues=["default", "mail"])

    @jobs.job(name="fails", retry=False)
    async def fails(tag: str) -> None:
        raise ValueError(f"no {tag}")

    insp = Inspector(jobs)

    def dead_count(wanted: int) -> Callable[[], Awaitable[bool]]:
        async def reached() -> bool:
            return await insp.dead.size() == wanted
        return reached

    async with jobs.worker():
        # One at a time: each dies after the one before, on alternating queues.
        for died, (queue, tag) in enumerate([("default", "d1"), ("mail", "m1"),
                                             ("default", "d2")], start=1):
            await fails.options(queue=queue).enqueue(tag)
            await wait_until(dead_count(died), timeout=10)
    # Stored one set per queue...
    assert await store.client.zcard(store.keys.dead("default")) == 2
    assert await store.client.zcard(store.keys.dead("mail")) == 1
    # ...seen as one: counted together, and paged newest death first across queues.
    page = await insp.dead.page()
    assert page.total == 3
    assert (await insp.summary())["dead"] == 3
    assert [(r.home, r.args) for r in page.items] == [
        ("default", ["d2"]), ("mail", ["m1"]), ("default", ["d1"])]
    scores = [r.score or 0.0 for r in page.items]
    assert scores == sorted(scores, reverse=True)
    # Retried, the mail job goes back on the mail queue (its own slot), nowhere else.
    done = await insp.dead.retry([page.items[1].token])
    assert (done.done, done.missing) == (1, 0)
    [raw] = await store.client.lrange(store.keys.queue("mail"), 0, -1)
    assert (json.loads(raw)["queue"], json.loads(raw)["args"]) == ("mail", ["m1"])
    assert await store.client.llen(store.keys.queue("default")) == 0
    assert await store.client.zcard(store.keys.dead("mail")) == 0
    assert await insp.dead.size() == 2


async def test_counts_sum_every_queues_set(make_app: Callable[..., App], store: Store) -> None:
    jobs = make_app()
    keys, now = store.keys, time.time()
    await store.register_queues(["mail", "reports"])
    await store.client.zadd(keys.schedule("default"), {entry("s1", "default"): now + 60,
                                                       entry("s2", "default"): now + 61})
    await store.client.zadd(keys.schedule("mail"), {entry("s3", "mail"): now + 60})
    await store.client.zadd(keys.retry("reports"), {entry(f"r{n}", "reports"): now + n
                                                    for n in range(4)})
    await store.client.zadd(keys.dead("mail"), {entry("d1", "mail"): now})
    insp = Inspector(jobs)
    summary = await insp.summary()
    assert (summary["scheduled"], summary["retries"], summary["dead"]) == (3, 4, 1)
    sizes = [await insp.job_set(name).size() for name in ("scheduled", "retries", "dead")]
    assert sizes == [3, 4, 1]
    # The App's own queue is counted even when the registry of names lacks it.
    await store.client.srem(keys.queues, "default")
    assert await insp.scheduled.size() == 3


async def test_search_finds_an_entry_in_either_queue(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    keys = store.keys
    await store.register_queues(["mail"])
    await store.client.zadd(keys.dead("default"), {
        entry("a", "default", error_message="Needle"): 1.0, entry("b", "default"): 2.0})
    await store.client.zadd(keys.dead("mail"), {
        entry("c", "mail", error_message="a needle"): 3.0, entry("d", "mail"): 4.0})
    insp = Inspector(jobs)
    found = await insp.dead.search("NEEDLE")
    assert found.complete
    assert [(r.jid, r.home) for r in found.items] == [("c", "mail"), ("a", "default")]
    limited = await insp.dead.search("needle", limit=1)
    assert (len(limited.items), limited.complete) == (1, False)
    # What a search found is acted on where it is.
    assert (await insp.dead.delete([found.items[0].token])).done == 1
    assert await store.client.zcard(keys.dead("mail")) == 1
    assert await store.client.zcard(keys.dead("default")) == 2


def model_order(sets: dict[str, dict[str, float]], newest_first: bool) -> list[bytes]:
    """The merged order: by score (highest first, newest first), equal scores by queue
    name, then as Redis orders them within a set (by member; reversed, newest first)."""
    ranked = []
    for index, name in enumerate(sorted(sets)):
        members = sorted(sets[name].items(), key=lambda item: (item[1], item[0].encode()),
                         reverse=newest_first)
        for rank, (member, score) in enumerate(members):
            ranked.append(((-score if newest_first else score), index, rank, member.encode()))
    return [member for *_, member in sorted(ranked)]


@pytest.fixture
def deep(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every page of several queues' sets found by seeking its start by score, as pages
    past ``MERGE_DEPTH`` are."""
    monkeypatch.setattr("cogworker_async.redis.admin_sets.MERGE_DEPTH", 0)


@pytest.mark.parametrize("kind", ["retries", "dead"])
async def test_deep_pages_give_the_same_order_as_one_merge(
    make_app: Callable[..., App], store: Store, deep: None, kind: str
) -> None:
    jobs = make_app()
    target = {"retries": "retry", "dead": "dead"}[kind]
    # Scores shared within and across queues, and infinite ones: ties are the hard part.
    sets = {queue: {f"{queue}-{n:02}": [float("-inf"), 1.0, 2.5, 2.5, 7.0,
                                         float("inf")][n % 6] + (n % 2) * (n > 12)
                    for n in range(25)}
            for queue in ("alpha", "beta", "gamma")}
    await store.register_queues(list(sets))
    for queue, members in sets.items():
        await store.client.zadd(getattr(store.keys, target)(queue), members)
    insp = Inspector(jobs)
    job_set = insp.job_set(kind)
    seen: list[bytes] = []
    for number in range(1, 13):
        page = await job_set.page(number, 7)
        seen += [r.raw for r in page.items]
    assert seen == model_order(sets, newest_first=kind == "dead")
    assert (await job_set.page(12, 7)).items == []


async def test_an_entry_is_found_in_the_set_that_holds_it_whatever_it_says(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    keys = store.keys
    await store.register_queues(["mail"])
    says_default = entry("x", "default")  # a hand-written entry, or an older version's
    says_nothing = entry("y", None)
    await store.client.zadd(keys.dead("mail"), {says_default: 1.0, says_nothing: 2.0})
    admin = Admin(jobs._store())
    raws = [says_default.encode(), says_nothing.encode()]
    assert await admin.locate("dead", raws) == ["mail", "mail"]
    assert await admin.set_contains("dead", raws) == [True, True]
    insp = Inspector(jobs)
    [nothing, default] = (await insp.dead.page()).items
    assert (await insp.dead.retry([default.token])).done == 1
    [raw] = await store.client.lrange(keys.queue("mail"), 0, -1)
    assert json.loads(raw)["queue"] == "mail"  # it is pushed where it was: its field says so
    assert await admin.set_remove("dead", [nothing.raw]) == [True]
    assert await admin.set_remove("dead", [nothing.raw]) == [False]


async def test_clearing_a_queue_keeps_its_name_while_its_sets_hold_jobs(
    make_app: Callable[..., App], store: Store
) -> None:
    jobs = make_app()
    keys = store.keys
    await store.register_queues(["mail"])
    await store.client.lpush(keys.queue("mail"), entry("q", "mail"))
    await store.client.zadd(keys.dead("mail"), {entry("d", "mail"): 1.0})
    insp = Inspector(jobs)
    assert await insp.queue("mail").clear() == 1
    # Forgotten, the name would hide the dead job from every view.
    assert "mail" in await insp.queues.names()
    assert await insp.dead.size() == 1
    assert await insp.dead.delete_all() == 1
    assert await insp.queue("mail").clear() == 0
    assert "mail" not in await insp.queues.names()


# -- on a Redis Cluster: every queue's set in its own slot, often on another node ----


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    from tests.cluster_harness import ClusterProcess

    with ClusterProcess(replicas=0) as cluster:
        yield cluster.url


@pytest.mark.timeout(120)
async def test_on_a_cluster_the_sets_of_queues_on_other_nodes_are_one(
    cluster_url: str, namespace: str
) -> None:
    from tests.cluster_harness import ClusterProcess

    queues = ["default", "mail", "zeta"]
    jobs = App(cluster_url, namespace=namespace, queues=queues)
    try:
        store = jobs._store()
        assert store.cluster
        keys = Keys(namespace)
        assert len({ClusterProcess.slot_of(keys.dead(q)) for q in queues}) == 3
        await store.register_queues(queues)
        now = time.time()  # a dead job older than dead_max_age is trimmed as one is filed
        for n, queue in enumerate(queues):
            await store.client.zadd(keys.dead(queue), {entry(f"d-{queue}", queue): now + n})
            await store.client.zadd(keys.retry(queue), {entry(f"r-{queue}", queue): now + n})
        insp = Inspector(jobs)
        summary = await insp.summary()
        assert (summary["dead"], summary["retries"]) == (3, 3)
        server = await insp.server()
        assert server["version"] is not None
        assert server["cluster_nodes"] == 3
        page = await insp.dead.page()
        assert [r.home for r in page.items] == ["zeta", "mail", "default"]
        assert [r.jid for r in (await insp.dead.search("d-mail")).items] == ["d-mail"]
        assert (await insp.dead.retry([page.items[1].token])).done == 1
        assert await store.client.llen(keys.queue("mail")) == 1
        assert (await insp.retries.kill_all()).done == 3
        assert await insp.dead.size() == 5
        assert await insp.queue("mail").clear() == 1
        assert await insp.dead.delete_all() == 5
        assert await insp.queue("mail").clear() == 0
        assert await insp.queues.names() == ["default", "zeta"]
        await insp.processes.all()
        await insp.periodic.all()
    finally:
        await jobs.close()
