"""The admin model's view of jobs waiting for their parents (``Inspector.waiting``,
``Inspector.jobs``): counts per queue, a page of a queue's waiting jobs, what one waits
for and its payload — read from what the enqueue really stored — and the keys of another
type a co-tenant may leave, read as none waiting rather than failing a page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import pytest

from cogworker_async import App
from cogworker_async.admin import Inspector
from cogworker_async.admin.waiting import ParentLink
from cogworker_async.redis.store import Store

LATER: Final = 3600.0


def shop(make_app: Callable[..., App]) -> tuple[App, Any]:
    app = make_app()

    @app.job(name="work")
    async def work(*args: Any, **kwargs: Any) -> None: ...

    return app, work


async def test_counts_pages_and_what_a_waiting_job_waits_for(
        make_app: Callable[..., App]) -> None:
    app, work = shop(make_app)
    insp = Inspector(app)
    first = await work.options(queue="mail").enqueue_in(LATER, "first")
    second = await work.enqueue_in(LATER, "second")
    child = await work.options(after=[first, second], on_parent_failure="run").enqueue(
        "x", tag="y")
    others = [await work.options(after=[first], queue="mail").enqueue(n) for n in range(3)]

    infos = {info.name: info for info in await insp.queues.infos(["default", "mail"])}
    assert (infos["default"].size, infos["default"].waiting_for_parents) == (0, 1)
    assert infos["mail"].waiting_for_parents == 3
    assert (await insp.summary())["waiting_for_parents"] == 4
    assert await insp.waiting.count("mail") == 3

    page = await insp.waiting.page("mail", 1, size=2)
    assert (page.total, page.pages) == (3, 2)
    assert [job.jid for job in page.items] == others[:0:-1]  # the newest first
    assert all(job.status.state == "waiting" and job.status.name == "work"
               and job.pending == 1 for job in page.items)
    assert [job.jid for job in (await insp.waiting.page("mail", 2, size=2)).items] == \
        others[:1]

    status = await insp.jobs.status(child)
    assert status.state == "waiting"
    found = await insp.jobs.waiting_for(status)
    assert found is not None
    assert found.parents == [ParentLink("mail", first, True), ParentLink("default", second, True)]
    assert (found.pending, found.on_parent_failure, found.takes_result_of) == (2, "run", None)
    assert found.since is not None
    copy = await insp.jobs.copy(status)
    assert copy.place == "waiting"
    assert copy.record is not None
    assert (copy.record.jid, copy.record.args, copy.record.kwargs) == (child, ["x"],
                                                                       {"tag": "y"})
    assert await insp.jobs.waiting_for(await insp.jobs.status(first)) is None  # scheduled


async def test_a_job_that_takes_its_parents_result_shows_null_in_its_place(
        make_app: Callable[..., App]) -> None:
    app, work = shop(make_app)
    insp = Inspector(app)
    parent = await work.enqueue_in(LATER, "parent")
    child = await work.options(after=[parent], pass_result=True).enqueue("second")
    status = await insp.jobs.status(child)
    found = await insp.jobs.waiting_for(status)
    assert found is not None
    assert found.takes_result_of == ParentLink("default", parent, True)
    copy = await insp.jobs.copy(status)
    assert copy.record is not None
    assert copy.record.args == [None, "second"]


async def test_a_cancelled_waiting_job_leaves_the_list_at_once(
        make_app: Callable[..., App]) -> None:
    app, work = shop(make_app)
    insp = Inspector(app)
    parent = await work.enqueue_in(LATER, "parent")
    child = await work.options(after=[parent]).enqueue()
    assert await insp.jobs.cancel(child) == "cancelled"
    status = await insp.jobs.status(child)
    assert status.state == "cancelled"
    assert await insp.jobs.waiting_for(status) is None
    assert (await insp.waiting.page("default")).items == []


async def test_a_cleared_queue_keeps_its_name_while_jobs_wait_on_it(
        make_app: Callable[..., App], store: Store) -> None:
    app, work = shop(make_app)
    insp = Inspector(app)
    parent = await work.options(queue="mail").enqueue_in(LATER, "parent")
    await work.options(after=[parent], queue="side").enqueue()
    assert await insp.queue("side").clear() == 0
    assert "side" in await insp.queues.names()  # else its waiting job left every view


@pytest.mark.parametrize("key", ["waiting", "dep", "dep_pending"])
async def test_keys_of_another_type_read_as_none_waiting(
        make_app: Callable[..., App], store: Store, key: str) -> None:
    app, _ = shop(make_app)
    insp = Inspector(app)
    names = {"waiting": store.keys.waiting("default"),
             "dep": store.keys.dep("default", "j1"),
             "dep_pending": store.keys.dep_pending("default", "j1")}
    if key != "waiting":
        await store.client.zadd(store.keys.waiting("default"), {"j1": 1.0})
    await store.client.set(names[key], "not ours")
    [info] = await insp.queues.infos(["default"])
    assert info.waiting_for_parents == (0 if key == "waiting" else 1)
    page = await insp.waiting.page("default")
    assert [job.jid for job in page.items] == ([] if key == "waiting" else ["j1"])
    assert await insp.admin().dep_record("default", "j1") is None
