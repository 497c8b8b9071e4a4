"""One dashboard's state and its page plumbing: the Inspector, the templates, the route
table, links and redirects.

Nothing here is module-global: ``create_dashboard`` makes one ``Site`` per dashboard, so
two dashboards in one process (two Apps, two mounts) share no state and no links.
Links are built from this dashboard's own route table plus the ``root_path`` it is
mounted at — not ``request.url_for``, which asks the outermost router and would point a
second unnamed mount at the first one's pages.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Router

from cogworker_async.admin.api import Inspector
from cogworker_async.admin.records import Done, printable
from cogworker_async.admin.serving import UNSERVED_HINT
from cogworker_async.errors import CogworkerError
from cogworker_async.jobs import priority
from cogworker_async.redis.errors import unreachable as redis_unreachable
from cogworker_async.redis.urls import mask
from cogworker_async.web import format
from cogworker_async.web.security import CSRF_FIELD, csrf_token, set_csrf_cookie

if TYPE_CHECKING:
    from cogworker_async.app import App

HERE: Final = Path(__file__).resolve().parent
TEMPLATES: Final = HERE / "templates"
STATIC: Final = HERE / "static"

SET_KINDS: Final = ("scheduled", "retries", "dead")
TABS: Final = (("dashboard", "Dashboard"), ("queues", "Queues"), ("busy", "Busy"),
               ("scheduled", "Scheduled"), ("retries", "Retries"), ("dead", "Dead"),
               ("batches", "Batches"), ("periodic", "Periodic"), ("limits", "Limits"),
               ("metrics_jobs", "Metrics"))
"""The nav, in order (route name, label). Metrics last, as in Sidekiq 7; its route is
``/metrics/jobs`` (``/metrics`` is the Prometheus scrape endpoint)."""
VERBS: Final = {"retried": "Put back on its queue", "deleted": "Deleted",
                "killed": "Moved to dead", "cleared": "Cleared",
                "cancelled": "Cancelled or, if running, asked to stop"}
"""The actions a redirect may report (anything else in the query string is ignored)."""
CANCELS: Final = {
    "cancelled": "Cancelled: the job will not run.",
    "stopping": "Stopping: its process was asked to stop it (an async job stops within "
                "about a second; a plain function sees current_job().cancel_requested).",
    "finished": "Nothing done: the job had already finished.",
    "unknown": "Nothing done: no job with this jid is known (never enqueued here, or its "
               "record expired).",
}
"""What the job page's Cancel did (``status.CancelOutcome``), said after its redirect."""
PAUSES: Final = {
    "paused": "Paused: no worker starts a job from this queue until it is resumed (jobs "
              "running now finish; enqueues still land).",
    "resumed": "Resumed: workers take its jobs again.",
    "was-paused": "Nothing done: the queue was already paused.",
    "was-running": "Nothing done: the queue was not paused.",
}
"""What a queue's Pause / Resume button did, said after its redirect."""
MAX_REPORTED: Final = 10**9
MAX_PAGE: Final = 10_000_000
"""Page numbers beyond this are read as this (a window far past any real queue's end)."""
NO_STORE: Final = {"cache-control": "no-store"}
"""Pages are live data and carry a CSRF token: never cached."""
UNAVAILABLE: Final = 503
RETRY_AFTER_SECONDS: Final = 5
RETRY_AFTER: Final = {"retry-after": str(RETRY_AFTER_SECONDS)}
"""A page answered while Redis is out of reach: worth trying again soon."""

log = logging.getLogger(__name__)


def environment() -> jinja2.Environment:
    """The templates, escaping every value unless a template says otherwise (none do)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters.update(duration=format.duration, relative=format.relative, utc=format.utc,
                       size=format.size, pretty=format.pretty, backtrace=format.backtrace,
                       plural=format.plural, na=format.na, brief=format.brief,
                       percent=format.percent, capped=format.capped,
                       priorities=priority.describe)
    env.globals["unserved_hint"] = UNSERVED_HINT  # the mark's tooltip (_macros.html)
    return env


def page_number(request: Request, name: str = "page") -> int:
    """The page asked for by query parameter ``name`` (1 unless it is a number)."""
    try:
        return max(1, min(int(request.query_params.get(name, "1")), MAX_PAGE))
    except ValueError:
        return 1


def _count(value: str | None) -> int:
    try:
        return max(0, min(int(value or 0), MAX_REPORTED))
    except ValueError:
        return 0


def notice(params: Mapping[str, str]) -> str | None:
    """The message a redirect after an action asked for (``?did=retried&done=3``,
    ``?cancel=stopping``)."""
    if params.get("none"):
        return "Nothing selected: tick some jobs first."
    if params.get("cancel") in CANCELS:
        return CANCELS[params["cancel"]]
    if params.get("pause") in PAUSES:
        return PAUSES[params["pause"]]
    verb = VERBS.get(params.get("did", ""))
    if verb is None:
        return None
    done, missing, refused = (_count(params.get(k)) for k in ("done", "missing", "refused"))
    parts = [f"{verb}: {done} job{'' if done == 1 else 's'}."]
    if missing:
        parts.append(f"{missing} no longer there (it ran, or another process moved it).")
    if refused:
        parts.append(f"{refused} left alone (already dead, or not a runnable job).")
    return " ".join(parts)


class Site:
    """One dashboard: what it reads through, how it renders, where its pages are."""

    def __init__(self, jobs: App, *, title: str) -> None:
        self.inspector = Inspector(jobs)
        self.title = title
        self.env = environment()
        self.router = Router()
        """The dashboard's routes (filled by ``routes.build``), used to build links."""

    def url(self, request: Request, name: str, /, **params: Any) -> str:
        """The path of a page of this dashboard, under the path it is mounted at."""
        quoted = {key: quote(str(value), safe="") for key, value in params.items()}
        path = self.router.url_path_for(name, **quoted)
        return str(request.scope.get("root_path", "")).rstrip("/") + str(path)

    async def render(self, request: Request, template: str, *, status: int = 200,
                     **context: Any) -> HTMLResponse:
        token, new = csrf_token(request)
        page = self.env.get_template(template).render(
            request=request, url=functools.partial(self.url, request), title=self.title,
            tabs=TABS, csrf_field=CSRF_FIELD, csrf_token=token, now=time.time(),
            summary=await self.inspector.summary(), notice=notice(request.query_params),
            **context)
        # Stored text may hold what UTF-8 cannot encode: replaced here, once for every
        # page, rather than in each template that shows a job, a beat or an event.
        response = HTMLResponse(printable(page), status, headers=NO_STORE)
        if new:
            set_csrf_cookie(response, request, token)
        return response

    async def unavailable(self, request: Request, exc: Exception) -> Response:
        """503 for any page or action while Redis cannot be reached or refuses: what
        Redis said and where (password masked), rendered without asking Redis again."""
        where, said = self._redis_said(exc)
        unreachable = redis_unreachable(exc)
        headline = "Redis is unreachable" if unreachable else "Redis refuses the dashboard"
        log.warning("dashboard: %s (%s): %s", headline.lower(), where, said)
        if request.url.path.endswith(".json"):  # the live graph's poll: it shows the text
            return JSONResponse({"error": printable(f"{headline}: {said}")}, UNAVAILABLE,
                                headers={**NO_STORE, **RETRY_AFTER})
        page = self.env.get_template("unavailable.html").render(
            url=functools.partial(self.url, request), title=self.title, headline=headline,
            where=where, said=said, unreachable=unreachable)
        return HTMLResponse(printable(page), UNAVAILABLE, headers={**NO_STORE, **RETRY_AFTER})

    def _redis_said(self, exc: Exception) -> tuple[str, str]:
        """The masked URL of the App's Redis, and the error with that URL masked in it."""
        try:
            url = self.inspector.app.redis_url()
        except CogworkerError:
            url = ""
        said = f"{type(exc).__name__}: {exc}"
        if url:
            said = said.replace(url, mask(url))
        return (mask(url) if url else "(no Redis URL)"), said

    def redirect(self, request: Request, name: str, query: Mapping[str, Any], /,
                 **params: Any) -> RedirectResponse:
        """303 back to a page (GET), the outcome in the query string."""
        wanted = {key: value for key, value in query.items() if value not in (None, "", 0)}
        target = self.url(request, name, **params)
        return RedirectResponse(f"{target}?{urlencode(wanted)}" if wanted else target, 303)


def outcome(verb: str, result: Done | int) -> dict[str, Any]:
    """A redirect's query describing what an action did."""
    if isinstance(result, int):
        return {"did": verb, "done": str(result)}
    return {"did": verb, "done": str(result.done), "missing": result.missing,
            "refused": len(result.refused)}
