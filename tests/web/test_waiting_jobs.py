"""Jobs waiting for their parents (``options(after=[...])``) on the dashboard: a waiting
job's page (its state, each parent linking to its page and marked pending or ended, its
on_parent_failure, its arguments), its Cancel button (CSRF-guarded; the job then never
runs), the waiting count on the Queues tab and a queue's page, and the paged list of a
queue's waiting jobs. Real Redis, real enqueues; a worker only where a parent must end."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Final

import httpx
import pytest

from tests.conftest import url_of_topology
from tests.waiting import wait_until
from tests.web.conftest import HOUR, Board, page_token
from tests.web.test_job_page import text_of

pytestmark = pytest.mark.timeout(60)

# On one Redis and on a Redis Cluster: a waiting job is in its own queue's slot, its
# parents in theirs (another queue: another slot, another node).
redis_url = pytest.fixture(params=["single", "cluster"])(url_of_topology)

RELAYED: Final = 10.0
"""Seconds for a parent's end to reach its dependent (the worker's relay polls)."""


async def parent_later(board: Board, tag: str, queue: str = "default") -> str:
    """A parent that stays scheduled an hour: its dependents wait all the while."""
    jid = await board.ok.options(queue=queue).enqueue_in(HOUR, tag)
    assert jid is not None
    return jid


def waits_for(board: Board, jid: str, pending: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        found = await board.inspector.jobs.waiting_for(await board.app.status(jid))
        return found is not None and found.pending == pending
    return check


async def test_a_waiting_job_shows_its_parents_pending_or_ended_and_its_policy(
        board: Board, client: httpx.AsyncClient) -> None:
    later = await parent_later(board, "later", queue="mail")
    soon = await board.ok.enqueue("soon")
    assert soon is not None
    child = await board.ok.options(after=[soon, later], on_parent_failure="dead").enqueue(
        "<b>child</b>")
    assert child is not None
    async with board.app.worker():  # runs ``soon`` (``later`` is an hour away)
        await wait_until(waits_for(board, child, pending=1), timeout=RELAYED)

    page = await client.get(f"/jobs/{child}")
    assert page.status_code == 200
    shown = text_of(page)
    assert f"Job {child} waiting" in shown
    assert "Waits for 2 parents, 1 not ended" in shown
    assert f'<a href="/jobs/{soon}" data-parent="ended">{soon}</a>' in page.text
    assert f'<a href="/jobs/{later}" data-parent="pending">{later}</a>' in page.text
    assert "mail · pending" in shown  # each parent's queue
    assert 'data-on-parent-failure="dead"' in page.text
    assert "If a parent fails dead: it is filed in dead" in shown
    # It may still run: its arguments (from its dep hash), and a Cancel button.
    assert '"<b>child</b>"' in shown
    assert "<b>child</b>" not in page.text  # escaped, never markup
    assert f'action="/jobs/{child}/cancel"' in page.text
    assert ">Cancel</button>" in page.text
    assert "No arguments to show" not in shown

    parent_page = text_of(await client.get(f"/jobs/{later}"))
    assert f"Job {later} scheduled" in parent_page  # the link lands on the parent


async def test_a_job_that_takes_its_parents_result_says_which(
        board: Board, client: httpx.AsyncClient) -> None:
    parent = await parent_later(board, "first")
    child = await board.ok.options(after=[parent], pass_result=True).enqueue()
    assert child is not None
    page = await client.get(f"/jobs/{child}")
    shown = text_of(page)
    assert f'<a href="/jobs/{parent}" data-takes-result>{parent}</a>' in page.text
    assert f"Its first argument, null here, is the result of job {parent}" in shown
    assert "[ null ]" in shown  # the payload's two halves, joined around a placeholder
    assert "If a parent fails cancel: it is cancelled" in shown  # the default


async def test_the_queues_tab_and_a_queue_page_count_the_waiting_jobs(
        board: Board, client: httpx.AsyncClient) -> None:
    parent = await parent_later(board, "parent")
    children = [await board.ok.options(after=[parent], queue="mail").enqueue(f"c{i}")
                for i in range(3)]
    await board.ok.enqueue("queued")  # on the list: in the size, not in the count

    queues = await client.get("/queues")
    row = queues.text.split('href="/queues/mail"', 1)[1].split("</tr>", 1)[0]
    assert 'data-waiting-for-parents="3"' in row
    assert 'href="/queues/mail/waiting">3</a>' in row
    default = queues.text.split('href="/queues/default"', 1)[1].split("</tr>", 1)[0]
    assert 'data-waiting-for-parents="0"' in default
    assert "3 waiting for parents" in text_of(queues)  # the header's totals

    mail = await client.get("/queues/mail")
    assert 'href="/queues/mail/waiting" data-waiting-for-parents>3 waiting for parents' \
        in mail.text
    assert "This queue is empty." in text_of(mail)  # none of them is on its list
    assert "data-waiting-for-parents>" not in (await client.get("/queues/default")).text

    listed = await client.get("/queues/mail/waiting")
    assert listed.status_code == 200
    for jid in children:
        assert f'<a href="/jobs/{jid}">{jid}</a>' in listed.text
    assert "3 jobs" in text_of(listed)
    assert listed.text.count('class="state waiting"') == 3


async def test_the_list_of_waiting_jobs_is_paged_newest_first(
        board: Board, client: httpx.AsyncClient) -> None:
    parent = await parent_later(board, "parent")
    children = [await board.ok.options(after=[parent]).enqueue(f"c{i}") for i in range(27)]
    first = await client.get("/queues/default/waiting")
    on_first = re.findall(r'<tr data-waiting="([^"]+)">', first.text)
    assert on_first == list(reversed(children))[:25]  # a page of 25, the newest first
    assert "page 1 of 2" in text_of(first)
    second = await client.get("/queues/default/waiting?page=2")
    assert re.findall(r'<tr data-waiting="([^"]+)">', second.text) == children[1::-1]
    far = await client.get("/queues/default/waiting?page=9")
    assert "No jobs on page 9" in text_of(far)
    assert (await client.get("/queues/no%20such/waiting")).status_code == 404
    assert "No job of this queue waits" in text_of(await client.get("/queues/mail/waiting"))


async def test_cancel_a_waiting_job_from_its_page_and_it_never_runs(
        board: Board, client: httpx.AsyncClient) -> None:
    parent = await parent_later(board, "parent")
    child = await board.ok.options(after=[parent]).enqueue("child")
    assert child is not None

    await client.get(f"/jobs/{child}")  # the cookie, without the form's token
    refused = await client.post(f"/jobs/{child}/cancel", data={})
    assert refused.status_code == 403
    assert (await board.app.status(child)).state == "waiting"

    token = await page_token(client, f"/jobs/{child}")
    response = await client.post(f"/jobs/{child}/cancel", data={"csrf_token": token})
    assert response.status_code == 303
    assert response.headers["location"] == f"/jobs/{child}?cancel=cancelled"
    shown = text_of(await client.get(response.headers["location"]))
    assert "Cancelled: the job will not run." in shown
    assert f"Job {child} cancelled" in shown
    assert "Waits for" not in shown
    assert "/cancel" not in (await client.get(f"/jobs/{child}")).text  # nothing to cancel
    # The cancel takes it out of the queue's waiting set at once (lua/cancel.lua).
    listed = await client.get("/queues/default/waiting")
    assert child not in text_of(listed)
    row = (await client.get("/queues")).text.split('href="/queues/default"', 1)[1]
    assert 'data-waiting-for-parents="0"' in row.split("</tr>", 1)[0]

    [entry] = (await board.inspector.scheduled.page()).items
    assert (await board.inspector.scheduled.retry([entry.token])).done == 1  # parent: now
    async with board.app.worker():
        await wait_until(lambda: _state_is(board, parent, "succeeded"), timeout=RELAYED)
        await wait_until(lambda: _none_waiting(board), timeout=RELAYED)
    assert board.ran == ["parent"]  # the child never ran
    assert (await board.app.status(child)).state == "cancelled"
    row = (await client.get("/queues")).text.split('href="/queues/default"', 1)[1]
    assert 'data-waiting-for-parents="0"' in row.split("</tr>", 1)[0]


async def _state_is(board: Board, jid: str, state: str) -> bool:
    return (await board.app.status(jid)).state == state


async def _none_waiting(board: Board) -> bool:
    return await board.inspector.waiting.count("default") == 0
