"""The dashboard's pages (GET, read-only) and its route table.

Every read goes through the ``Inspector`` and is bounded: a page of 25, a search with a
budget, a window of recent events. No view loads a whole queue or set, however large.
The actions (POST) are in ``actions.py`` (and the job page's Cancel in ``job_page.py``,
a batch's in ``batch_page.py``, with their pages); the table below gives them POST-only
routes, so that a GET of an action URL can never change anything: a 405 (a job's or a
batch's Cancel: the page of an id ending in "/cancel", unknown).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from cogworker_async.admin.api import Queue
from cogworker_async.admin.limits import capacity_text
from cogworker_async.admin.records import JobRecord
from cogworker_async.admin.run_metrics import (
    DEFAULT_WINDOW_MINUTES,
    JobMetrics,
    MetricsSummary,
    bucket_labels,
    check_window,
    run_time,
)
from cogworker_async.admin.sets import JobSet
from cogworker_async.errors import install_extra
from cogworker_async.web import actions, batch_page, format, job_page
from cogworker_async.web.site import NO_STORE, SET_KINDS, STATIC, Site, page_number
from cogworker_async.worker.streak import Streak

Endpoint = Callable[[Request], Awaitable[Response]]

MAX_TERM: Final = 200
"""Characters of a search term used."""
WINDOWS: Final = (60, 120, 240, 480)
"""The Metrics tab's window choices, in minutes (any of 1..480 may be asked for)."""
BAD_REQUEST: Final = 400
NOT_IMPLEMENTED: Final = 501
"""/metrics without the metrics extra installed."""
MAX_GROUPS_SHOWN: Final = 50
"""Fair groups a queue's page lists, those with the most jobs waiting: a queue grouped
by tenant may have thousands, and the page is about its jobs (the rest are counted)."""


def search_term(request: Request) -> str:
    return request.query_params.get("q", "").strip()[:MAX_TERM]


# -- pages -----------------------------------------------------------------------------


def dashboard(site: Site) -> Endpoint:
    async def view(request: Request) -> Response:
        server = await site.inspector.server()
        history = await site.inspector.stats.history()
        return await site.render(request, "dashboard.html", tab="dashboard", server=server,
                                 history=format.bars(history))
    return view


def stats_json(site: Site) -> Endpoint:
    """What the live graph polls: the totals and when they were read."""
    async def view(request: Request) -> Response:
        totals = await site.inspector.stats.totals()
        return JSONResponse({"processed": totals.processed, "failed": totals.failed,
                             "at": totals.at}, headers=NO_STORE)
    return view


def queues(site: Site) -> Endpoint:
    async def view(request: Request) -> Response:
        page = await site.inspector.queues.page(page_number(request))
        return await site.render(request, "queues.html", tab="queues", queues=page.items,
                                 page=page)
    return view


def _queue(site: Site, request: Request) -> Queue | None:
    try:
        return site.inspector.queue(request.path_params["name"])
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One fair group of a queue, as its page lists it."""

    name: str
    waiting: int
    running: int


@dataclass(frozen=True, slots=True)
class GroupTable:
    """The groups a queue's page lists (at most ``MAX_GROUPS_SHOWN``), and how many
    groups have jobs waiting or running in all."""

    rows: list[GroupRow]
    total: int


def group_table(waiting: Mapping[str, int], running: Mapping[str, int],
                limit: int = MAX_GROUPS_SHOWN) -> GroupTable:
    """The groups with jobs waiting or running, the most waiting first (then the most
    running, then by name, so that the order holds from one reload to the next)."""
    # A group may run without any job left waiting (its last one taken), or wait with
    # none running: both are listed, each count 0 where the other read has none.
    rows = sorted((GroupRow(name, waiting.get(name, 0), running.get(name, 0))
                   for name in {*waiting, *running}),
                  key=lambda row: (-row.waiting, -row.running, row.name))
    return GroupTable(rows[:limit], len(rows))


def queue(site: Site) -> Endpoint:
    async def view(request: Request) -> Response:
        found = _queue(site, request)
        if found is None:
            return await site.render(request, "missing.html", status=404, tab="queues",
                                     what="There is no queue by that name.")
        info = await found.info()
        page = await found.page(page_number(request))
        groups = group_table(info.by_group, await found.groups_running())
        return await site.render(request, "queue.html", tab="queues", queue=info, page=page,
                                 groups=groups)
    return view


def queue_waiting(site: Site) -> Endpoint:
    """A page of a queue's jobs waiting for their parents, the newest first."""
    async def view(request: Request) -> Response:
        found = _queue(site, request)
        if found is None:
            return await site.render(request, "missing.html", status=404, tab="queues",
                                     what="There is no queue by that name.")
        page = await site.inspector.waiting.page(found.name, page_number(request))
        return await site.render(request, "queue_waiting.html", tab="queues",
                                 name=found.name, page=page)
    return view


def busy(site: Site) -> Endpoint:
    async def view(request: Request) -> Response:
        processes = await site.inspector.processes.all()
        # Grouped by host, then by the ``run --processes`` supervisor that started them.
        alive = sorted((p for p in processes if p.alive),
                       key=lambda p: (p.hostname or "", p.supervisor or "", p.identity))
        return await site.render(
            request, "busy.html", tab="busy", alive=alive,
            progress=await site.inspector.jobs.running(alive),
            stopped=[p for p in processes if not p.alive],
            recoveries=await site.inspector.processes.recoveries(),
            burials=await site.inspector.processes.burials())
    return view


def job_set(site: Site, kind: str) -> Endpoint:
    """A page of a set, or what a search found in it."""
    async def view(request: Request) -> Response:
        jobs: JobSet = site.inspector.job_set(kind)
        term = search_term(request)
        if term:
            found = await jobs.search(term)
            return await site.render(request, "set.html", tab=kind, kind=kind, term=term,
                                     items=found.items, complete=found.complete, page=None)
        page = await jobs.page(page_number(request))
        return await site.render(request, "set.html", tab=kind, kind=kind, term="",
                                 items=page.items, complete=True, page=page)
    return view


def set_entry(site: Site, kind: str) -> Endpoint:
    """One entry in full: arguments, error, backtrace."""
    async def view(request: Request) -> Response:
        record: JobRecord | None
        try:
            record = await site.inspector.job_set(kind).find(request.path_params["token"])
        except ValueError:
            record = None
        if record is None:
            return await site.render(
                request, "missing.html", status=404, tab=kind,
                what="This entry is no longer here: it ran, or someone moved it.")
        return await site.render(request, "job.html", tab=kind, kind=kind, job=record)
    return view


def periodic(site: Site) -> Endpoint:
    async def view(request: Request) -> Response:
        infos = await site.inspector.periodic.all()
        return await site.render(request, "periodic.html", tab="periodic", periodics=infos)
    return view


def limits(site: Site) -> Endpoint:
    async def view(request: Request) -> Response:
        found = await site.inspector.limits.all()
        return await site.render(request, "limits.html", tab="limits", limits=found,
                                 capacity=capacity_text)
    return view


def window_param(request: Request) -> int | None:
    """The Metrics window asked for (minutes; the last hour unless asked), or None
    when it is not a window (not a whole number of 1..480 minutes)."""
    raw = request.query_params.get("window")
    if raw is None:
        return DEFAULT_WINDOW_MINUTES
    try:
        return check_window(int(raw))
    except ValueError:
        return None


async def _not_a_window(site: Site, request: Request) -> Response:
    # Said, not clamped: a hand-edited URL should not quietly show another window.
    return await site.render(request, "metrics_window.html", status=BAD_REQUEST,
                             tab="metrics_jobs", windows=WINDOWS,
                             asked=request.query_params.get("window", ""))


def metrics(site: Site) -> Endpoint:
    """Every job class over the window: the table, and a chart of the busiest."""
    async def view(request: Request) -> Response:
        window = window_param(request)
        if window is None:
            return await _not_a_window(site, request)
        by = "time" if request.query_params.get("by") == "time" else "runs"
        summary: MetricsSummary = await site.inspector.metrics.summary(window)
        chart = format.line_chart([(s.name, s.total_ms if by == "time" else s.runs)
                                   for s in summary.top])
        return await site.render(request, "metrics.html", tab="metrics_jobs",
                                 metrics=summary, chart=chart, by=by, windows=WINDOWS,
                                 ms=run_time)
    return view


def metrics_job(site: Site) -> Endpoint:
    """One job class over the window: its run-time heat map and its minutes."""
    async def view(request: Request) -> Response:
        name = request.path_params["name"]
        window = window_param(request)
        if window is None:
            return await _not_a_window(site, request)
        if not name:
            return await site.render(request, "missing.html", status=404, tab="metrics_jobs",
                                     what="Name a job class: /metrics/jobs/NAME.")
        found: JobMetrics = await site.inspector.metrics.job(name, window)
        minutes = found.minutes
        runs = format.line_chart([("runs", [m.totals.runs for m in minutes]),
                                  ("failed", [m.totals.failed for m in minutes])],
                                 css=("processed", "failed"))
        times = format.line_chart([("p95", [m.totals.p95_ms for m in minutes]),
                                   ("mean", [m.totals.mean_ms for m in minutes])],
                                  css=("p95", "mean"))
        heat = format.heat_map([m.histogram for m in minutes])
        return await site.render(request, "metrics_job.html", tab="metrics_jobs", job=found,
                                 runs=runs, times=times, heat=heat, labels=bucket_labels(),
                                 windows=WINDOWS, ms=run_time)
    return view


def prometheus(site: Site) -> Endpoint:
    """The system-wide gauges for Prometheus (queue sizes and latency, the sets, live
    processes; the metrics extra): ``cogworker_up 0`` and no other gauge while Redis
    cannot be read, never a hung scrape. One streak per dashboard: an outage is logged
    once, not at every scrape."""
    streak = Streak("reading Redis for the metrics")

    async def view(request: Request) -> Response:
        try:
            from cogworker_async.prometheus.system import render
        except ImportError:
            return PlainTextResponse("/metrics needs the metrics extra; "
                                     f"{install_extra('metrics')}\n", NOT_IMPLEMENTED)
        body, content_type = await render(site.inspector, streak=streak)
        return Response(body, media_type=content_type, headers=NO_STORE)
    return view


# -- the table -------------------------------------------------------------------------


def _set_routes(site: Site, kind: str) -> list[BaseRoute]:
    return [
        Route(f"/{kind}", job_set(site, kind), name=kind),
        Route(f"/{kind}/job/{{token}}", set_entry(site, kind), name=f"{kind}_job"),
        *(Route(f"/{kind}/{verb}", actions.set_action(site, kind, verb), methods=["POST"],
                name=f"{kind}_{verb}")
          for verb in actions.SET_VERBS),
    ]


FAVICON: Final = STATIC / "favicon.svg"


async def _favicon(request: Request) -> Response:
    return FileResponse(FAVICON, media_type="image/svg+xml")


def build(site: Site) -> list[BaseRoute]:
    """Every route of one dashboard (also stored on the site, to build its links)."""
    routes: list[BaseRoute] = [
        Route("/", dashboard(site), name="dashboard"),
        Route("/stats.json", stats_json(site), name="stats_json"),
        Route("/queues", queues(site), name="queues"),
        Route("/queues/{name}", queue(site), name="queue"),
        Route("/queues/{name}/waiting", queue_waiting(site), name="queue_waiting"),
        Route("/queues/{name}/delete", actions.queue_delete(site), methods=["POST"],
              name="queue_delete"),
        Route("/queues/{name}/clear", actions.queue_clear(site), methods=["POST"],
              name="queue_clear"),
        Route("/queues/{name}/pause", actions.queue_pause(site), methods=["POST"],
              name="queue_pause"),
        Route("/queues/{name}/resume", actions.queue_pause(site, resume=True),
              methods=["POST"], name="queue_resume"),
        Route("/busy", busy(site), name="busy"),
        *(route for kind in SET_KINDS for route in _set_routes(site, kind)),
        # A batch by its bid (``path``, as a jid: a bid is one of the same rules).
        Route("/batches", batch_page.tab(site), name="batches"),
        Route("/batches/{bid:path}/cancel", batch_page.cancel(site), methods=["POST"],
              name="batch_cancel"),
        Route("/batches/{bid:path}", batch_page.page(site), name="batch"),
        Route("/periodic", periodic(site), name="periodic"),
        Route("/limits", limits(site), name="limits"),
        # One job by its jid (any jid: ``path``, so that one holding "/" has a page too).
        Route("/jobs", job_page.search(site), name="job_search"),
        Route("/jobs/{jid:path}/cancel", job_page.cancel(site), methods=["POST"],
              name="job_cancel"),
        Route("/jobs/{jid:path}", job_page.page(site), name="job"),
        # Under /metrics/jobs: /metrics itself is the Prometheus scrape endpoint's.
        Route("/metrics", prometheus(site), name="prometheus"),
        Route("/metrics/jobs", metrics(site), name="metrics_jobs"),
        Route("/metrics/jobs/{name:path}", metrics_job(site), name="metrics_job"),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        # Browsers ask for /favicon.ico whatever the page links to (a 404 in the console
        # of every page otherwise): the same SVG, which every current browser takes.
        Route("/favicon.ico", _favicon, name="favicon"),
    ]
    site.router.routes = routes
    return routes
