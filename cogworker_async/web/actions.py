"""The dashboard's actions: POST only, each behind ``verified_form`` (same origin and
the CSRF token), each answered by a 303 back to the page it came from with what it did.

Entries are named by the Inspector's tokens (where the user saw them and a digest of
their bytes), so an action touches exactly the jobs on the user's screen, or reports
them gone — never a job that slid into their place meanwhile.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from cogworker_async.admin.records import MAX_PAGE_SIZE, Done
from cogworker_async.admin.sets import JobSet
from cogworker_async.web.security import verified_form
from cogworker_async.web.site import Site, outcome

Endpoint = Callable[[Request], Awaitable[Response]]

SET_VERBS: Final = ("retry", "delete", "kill")
PAST: Final = {"retry": "retried", "delete": "deleted", "kill": "killed"}
KEPT_FIELDS: Final = ("page", "q")
"""Form fields carried back into the redirect, so the user lands where they were."""


def tokens(form: FormData) -> list[str]:
    """The selected entries (at most a page's worth; a longer list is not from a page)."""
    chosen = [value for value in form.getlist("token") if isinstance(value, str)]
    if len(chosen) > MAX_PAGE_SIZE:
        raise HTTPException(400, f"at most {MAX_PAGE_SIZE} entries at a time")
    return chosen


def wants_all(form: FormData) -> bool:
    return form.get("all") == "1"


def kept(form: FormData) -> dict[str, Any]:
    return {name: form.get(name) for name in KEPT_FIELDS if isinstance(form.get(name), str)}


async def _act_on_set(jobs: JobSet, verb: str, form: FormData) -> Done | int | None:
    """Do ``verb`` on the selection or on the whole set; None if nothing was chosen."""
    if wants_all(form):
        if verb == "retry":
            return await jobs.retry_all()
        if verb == "delete":
            return await jobs.delete_all()
        return await jobs.kill_all()
    chosen = tokens(form)
    if not chosen:
        return None
    act = {"retry": jobs.retry, "delete": jobs.delete, "kill": jobs.kill}[verb]
    try:
        return await act(chosen)
    except ValueError as exc:  # a token no page of ours wrote
        raise HTTPException(400, str(exc)) from None


def set_action(site: Site, kind: str, verb: str) -> Endpoint:
    """Retry, delete or kill entries of the scheduled, retry or dead set."""
    async def endpoint(request: Request) -> Response:
        form = await verified_form(request)
        result = await _act_on_set(site.inspector.job_set(kind), verb, form)
        if result is None:
            return site.redirect(request, kind, {**kept(form), "none": "1"})
        return site.redirect(request, kind, {**kept(form), **outcome(PAST[verb], result)})
    return endpoint


def _queue_name(site: Site, request: Request) -> str:
    name = request.path_params["name"]
    try:
        return site.inspector.queue(name).name
    except (TypeError, ValueError):
        raise HTTPException(404, "There is no queue by that name.") from None


def queue_delete(site: Site) -> Endpoint:
    """Delete the selected jobs from a queue."""
    async def endpoint(request: Request) -> Response:
        form = await verified_form(request)
        name = _queue_name(site, request)
        chosen = tokens(form)
        if not chosen:
            return site.redirect(request, "queue", {**kept(form), "none": "1"}, name=name)
        try:
            result = await site.inspector.queue(name).delete(chosen)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        return site.redirect(request, "queue", {**kept(form), **outcome("deleted", result)},
                             name=name)
    return endpoint


def queue_clear(site: Site) -> Endpoint:
    """Delete every job on a queue."""
    async def endpoint(request: Request) -> Response:
        await verified_form(request)
        name = _queue_name(site, request)
        cleared = await site.inspector.queue(name).clear()
        return site.redirect(request, "queues", outcome("cleared", cleared))
    return endpoint


def queue_pause(site: Site, *, resume: bool = False) -> Endpoint:
    """Pause (or resume) a queue; back to the page the button was on."""
    async def endpoint(request: Request) -> Response:
        form = await verified_form(request)
        name = _queue_name(site, request)
        queues = site.inspector.queues
        changed = await (queues.resume(name) if resume else queues.pause(name))
        said = ("resumed" if changed else "was-running") if resume else \
            ("paused" if changed else "was-paused")
        if form.get("back") == "queue":
            return site.redirect(request, "queue", {"pause": said}, name=name)
        return site.redirect(request, "queues", {"pause": said})
    return endpoint
