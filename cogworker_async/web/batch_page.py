"""The Batches tab and a batch's page, with its Cancel button.

The tab shows two lists, each paged on its own: the batches not ended (``?open=N``) and
every batch kept (``?page=N``), newest first, 25 a page (``Inspector.batches``: one
bounded read a page and a status read a row). A batch's page shows its status, its
parent, children and callbacks as links, and a sample of each member set
(``MEMBERS_SHOWN``: a batch may have a million members; the counts say how many). A bid
no batch has is a 404 page that says so; text that cannot be a bid, a 400.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from cogworker_async.admin.batches import ENDED, MEMBER_SETS, MEMBERS_SHOWN
from cogworker_async.jobs.status import check_jid
from cogworker_async.redis.batches import DONE_TTL, OPEN_TTL
from cogworker_async.web.security import verified_form
from cogworker_async.web.site import Site, outcome, page_number
from cogworker_async.workflows.batch import BatchStatus

Endpoint = Callable[[Request], Awaitable[Response]]

BAD_REQUEST: Final = 400
NOT_FOUND: Final = 404


def _problem(bid: str) -> str | None:
    """Why ``bid`` cannot be a bid (said on the page), or None."""
    try:
        check_jid(bid)
    except (TypeError, ValueError) as exc:
        return str(exc).replace("a jid", "a bid")
    return None


def tab(site: Site) -> Endpoint:
    """``/batches``: the open batches, then every batch kept."""
    async def view(request: Request) -> Response:
        batches = site.inspector.batches
        open_page = await batches.page("open", page_number(request, "open"))
        all_page = await batches.page("all", page_number(request, "page"))
        return await site.render(request, "batches.html", tab="batches",
                                 open_page=open_page, all_page=all_page,
                                 kept_ended=DONE_TTL, kept_open=OPEN_TTL)
    return view


async def _found(site: Site, request: Request) -> BatchStatus | Response:
    """The batch the path names, or the page saying why there is none: text that
    cannot be a bid (400), a bid no batch has (404: never opened, or expired), or a
    batch whose hash cannot be read (404 too, said as such)."""
    bid = request.path_params["bid"]
    problem = _problem(bid)
    if problem is not None:
        return await site.render(request, "batch.html", status=BAD_REQUEST, tab="batches",
                                 bid=bid, problem=problem, batch=None)
    found = await site.inspector.batches.status(bid)
    if found is None or found.state == "unknown":
        return await site.render(request, "batch.html", status=NOT_FOUND, tab="batches",
                                 bid=bid, problem=None, batch=found)
    return found


def page(site: Site) -> Endpoint:
    """``/batches/{bid}``: one batch, its links and a sample of its members."""
    async def view(request: Request) -> Response:
        if not request.path_params["bid"]:
            return site.redirect(request, "batches", {})
        found = await _found(site, request)
        if isinstance(found, Response):
            return found
        members = await site.inspector.batches.members(found.bid)
        return await site.render(request, "batch.html", tab="batches", bid=found.bid,
                                 problem=None, batch=found, members=members,
                                 member_sets=MEMBER_SETS, shown=MEMBERS_SHOWN, ended=ENDED)
    return view


def cancel(site: Site) -> Endpoint:
    """POST ``/batches/{bid}/cancel``: cancel its members not ended (and its child
    batches'), back to its page saying how many."""
    async def endpoint(request: Request) -> Response:
        await verified_form(request)
        found = await _found(site, request)
        if isinstance(found, Response):
            return found
        cancelled = await site.inspector.batches.cancel(found.bid)
        return site.redirect(request, "batch", outcome("cancelled", cancelled), bid=found.bid)
    return endpoint
