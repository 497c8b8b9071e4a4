"""The job page: one job by its jid, whatever became of it (its status record: state,
times, progress, result or error, the process running it), with a Cancel button; and
the jid search in every page's header, which lands on it.

A jid names a job, not where it is: the page reads the record through
``Inspector.jobs`` (a lookup in each queue's slot, never a scan), so it shows a job that
is queued, running or long finished alike. A jid with no record is not an error: the
page says "unknown" (never enqueued here, or its record expired) with a 200. Its
arguments come from the job's payload, where it is now (``Inspector.jobs.copy``: a
bounded look), cut at ``format.SHOWN_BYTES``. A batch's member links to its batch (its
record names it); a batch's callback too, when its payload is found (its record does not).
A job waiting for its parents (``options(after=[...])``) lists them, each linking to its
own page and marked pending or ended, with what it does should one fail; its Cancel
works as any live job's (it never runs).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from cogworker_async.admin.job_status import StoredCopy
from cogworker_async.jobs.status import JobStatus, check_jid
from cogworker_async.web.security import verified_form
from cogworker_async.web.site import Site

Endpoint = Callable[[Request], Awaitable[Response]]

BAD_REQUEST: Final = 400
SET_PAGES: Final = {"schedule": "scheduled", "retry": "retries", "dead": "dead"}
"""The tab (and route prefix) of each set a job's payload may be found in."""


def _problem(jid: str) -> str | None:
    """Why ``jid`` cannot be a jid (said on the page), or None."""
    try:
        check_jid(jid)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def batch_of(found: JobStatus, copy: StoredCopy) -> tuple[str | None, str | None]:
    """The batch the job is a member of or a callback of, and which callback it is:
    from its record, else from its payload where found. (None, None): no batch, or
    text that cannot be a bid."""
    record = copy.record
    bid = found.batch or (record.batch_id if record is not None else None)
    if bid is None or _problem(bid) is not None:
        return None, None
    return bid, record.batch_callback if record is not None else None


def search(site: Site) -> Endpoint:
    """``/jobs?jid=...`` (the header's search box): on to that job's page."""
    async def view(request: Request) -> Response:
        jid = request.query_params.get("jid", "").strip()
        if not jid:
            return await site.render(request, "job_status.html", tab="", job=None,
                                     jid="", problem=None)
        return site.redirect(request, "job", {}, jid=jid)
    return view


def page(site: Site) -> Endpoint:
    """``/jobs/{jid}``: the job's status record, in full."""
    async def view(request: Request) -> Response:
        jid = request.path_params["jid"]
        if not jid:
            return site.redirect(request, "job_search", {})
        problem = _problem(jid)
        if problem is not None:
            return await site.render(request, "job_status.html", status=BAD_REQUEST, tab="",
                                     job=None, jid=jid, problem=problem)
        found = await site.inspector.jobs.status(jid)
        copy = await site.inspector.jobs.copy(found)
        waiting = await site.inspector.jobs.waiting_for(found)
        bid, callback = batch_of(found, copy)
        return await site.render(request, "job_status.html", tab="", job=found, jid=jid,
                                 problem=None, copy=copy, set_pages=SET_PAGES, bid=bid,
                                 callback=callback, waiting=waiting)
    return view


def cancel(site: Site) -> Endpoint:
    """POST ``/jobs/{jid}/cancel``: cancel the job, back to its page saying what was
    done (``?cancel=`` one of ``status.CancelOutcome``)."""
    async def endpoint(request: Request) -> Response:
        await verified_form(request)
        jid = request.path_params["jid"]
        problem = _problem(jid)
        if problem is not None:
            return await site.render(request, "job_status.html", status=BAD_REQUEST, tab="",
                                     job=None, jid=jid, problem=problem)
        outcome = await site.inspector.jobs.cancel(jid)
        return site.redirect(request, "job", {"cancel": outcome}, jid=jid)
    return endpoint
