"""Fair groups (``options(group=...)``) on the dashboard: the Queues tab counts each
queue's groups with jobs waiting, and a queue's page lists its groups — waiting and
running, the most waiting first, at most ``MAX_GROUPS_SHOWN`` — with names escaped.
Real Redis, real enqueues; a real worker holds jobs where one must be running, and a
hand-made in-progress list where a group's name is one no enqueue would take."""

from __future__ import annotations

import json
import re
from typing import Final

import httpx
import pytest

from cogworker_async.redis.store import Store
from cogworker_async.web.routes import MAX_GROUPS_SHOWN
from tests.waiting import wait_until
from tests.web.broken_text import REPLACED
from tests.web.conftest import Board
from tests.web.test_job_page import text_of

pytestmark = pytest.mark.timeout(60)

MARKUP: Final = "<b>zeta</b>"
"""A group named like markup: the page must show it as text."""
ESCAPED: Final = "&lt;b&gt;zeta&lt;/b&gt;"
HELD: Final = 15.0
"""Seconds a worker may take to start the jobs it is to hold (a busy 2-core machine)."""
GROUP_ROW: Final = re.compile(r'<tr data-group="([^"]*)">\s*<td class="args">[^<]*</td>\s*'
                              r'<td class="num" data-group-waiting="(\d+)">[^<]*</td>\s*'
                              r'<td class="num" data-group-running="(\d+)">')


def queue_row(html: str, name: str) -> str:
    """The Queues tab's row of queue ``name``."""
    return html.split(f'href="/queues/{name}"', 1)[1].split("</tr>", 1)[0]


def groups_listed(html: str) -> list[tuple[str, int, int]]:
    """A queue page's Groups table: (name as written in the page, waiting, running)."""
    return [(name, int(waiting), int(running))
            for name, waiting, running in GROUP_ROW.findall(html)]


async def test_the_queues_tab_and_a_queue_page_show_the_groups_waiting(
        board: Board, client: httpx.AsyncClient) -> None:
    for n in range(3):
        await board.ok.options(group="acme").enqueue(f"acme{n}")
    await board.ok.options(group=MARKUP).enqueue("zeta")
    await board.ok.enqueue("plain")  # no group: counted in the size, not in a group
    await board.ok.options(queue="mail").enqueue("mail")

    queues = (await client.get("/queues")).text
    default = queue_row(queues, "default")
    assert 'data-groups="2"' in default
    assert re.search(r'data-groups="2">2</td>', default), default
    assert re.search(r'data-groups="0">–</td>', queue_row(queues, "mail"))
    assert "<th class=\"num\">Groups</th>" in queues

    page = await client.get("/queues/default")
    assert page.status_code == 200
    shown = text_of(page)
    assert "5 jobs" in shown  # the grouped jobs are in the size too
    assert '<span data-groups="2">2 groups</span>' in page.text
    assert "Groups 2 groups with jobs waiting or running" in shown
    assert groups_listed(page.text) == [("acme", 3, 0), (ESCAPED, 1, 0)]  # most first
    assert MARKUP not in page.text  # escaped, never markup
    assert "shown" not in shown  # every group is listed: nothing left out to say

    mail = await client.get("/queues/mail")
    assert "data-groups" not in mail.text
    assert 'class="compact groups"' not in mail.text  # no groups, no table


async def test_a_queue_page_lists_a_group_running_with_none_left_waiting(
        board: Board, client: httpx.AsyncClient) -> None:
    for n in range(3):
        await board.hold.options(group="acme").enqueue(f"acme{n}")
    await board.hold.options(group="zeta").enqueue("zeta")
    await board.hold.enqueue("plain")
    queue = board.inspector.queue("default")

    async def one_of_each_running() -> bool:
        return await queue.groups_running() == {"acme": 1, "zeta": 1}

    # Two slots: the worker takes one job of each group in turn (acme's, then zeta's)
    # and holds both; acme's other two and the plain job wait.
    async with board.app.worker(concurrency=2):
        try:
            await wait_until(one_of_each_running, timeout=HELD)
            page = await client.get("/queues/default")
            queues = (await client.get("/queues")).text
        finally:
            board.release.set()  # the held jobs end: the worker stops without waiting

    # zeta's one job runs: no job of it waits, yet the page lists it (running 1).
    assert groups_listed(page.text) == [("acme", 2, 1), ("zeta", 0, 1)]
    assert '<span data-groups="1">1 group</span>' in page.text  # the header: waiting
    assert "Groups 2 groups with jobs waiting or running" in text_of(page)
    assert 'data-groups="1"' in queue_row(queues, "default")


async def test_a_queue_page_lists_the_groups_with_the_most_waiting_up_to_its_limit(
        board: Board, client: httpx.AsyncClient) -> None:
    extra = 2
    await board.ok.options(group="big").enqueue_many([(("big",), {})] * 3)
    for n in range(MAX_GROUPS_SHOWN + extra - 1):
        await board.ok.options(group=f"g{n:03}").enqueue(f"g{n}")
    total = MAX_GROUPS_SHOWN + extra

    page = await client.get("/queues/default")
    listed = groups_listed(page.text)
    assert len(listed) == MAX_GROUPS_SHOWN
    assert listed[0] == ("big", 3, 0)
    # The rest, one waiting each, by name: the same groups at every reload.
    assert [name for name, _, _ in listed[1:]] == [f"g{n:03}"
                                                   for n in range(MAX_GROUPS_SHOWN - 1)]
    assert (f"Groups {total} groups with jobs waiting or running, the "
            f"{MAX_GROUPS_SHOWN} with the most waiting shown") in text_of(page)
    assert f'<span data-groups="{total}">{total} groups</span>' in page.text
    assert f'data-groups="{total}"' in queue_row((await client.get("/queues")).text,
                                                 "default")


async def test_a_group_a_hand_made_job_names_is_shown_as_text(
        board: Board, client: httpx.AsyncClient, store: Store) -> None:
    # Running, as a process's in-progress list says: a name no enqueue would take (a
    # lone surrogate, which UTF-8 cannot encode) and one written as markup.
    keys = store.keys
    await store.client.sadd(keys.queue_identities("default"), "w-1")
    await store.client.lpush(keys.in_progress("default", "w-1"), *(
        json.dumps({"jid": f"j-{n}", "class": "web.ok", "group": name})
        for n, name in enumerate(("t\ud800", MARKUP))))

    page = await client.get("/queues/default")
    assert page.status_code == 200, page.text
    assert sorted(groups_listed(page.text)) == [(ESCAPED, 0, 1), (f"t{REPLACED}", 0, 1)]
    assert MARKUP not in page.text
    assert "data-groups" not in page.text  # none waiting: the header counts none
