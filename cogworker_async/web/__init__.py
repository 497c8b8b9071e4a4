"""The web dashboard: an ASGI app over one App's Redis, read and acted on through the
``Inspector`` (the same read/admin model as the admin CLI).

    from cogworker_async.web import create_dashboard
    api.mount("/jobs", create_dashboard(jobs, basic_auth=("admin", secret)))

or ``cogworker-async web app:jobs`` (loopback only unless ``--host`` says otherwise).
Each call makes an independent app: its state lives on it, never in this module, so
two dashboards in one process (two Apps, two mounts) do not see each other.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.types import Lifespan

from cogworker_async import environment
from cogworker_async.errors import ConfigurationError
from cogworker_async.redis.errors import RedisError
from cogworker_async.web import routes
from cogworker_async.web.security import AuthHook, Guard
from cogworker_async.web.site import Site

if TYPE_CHECKING:
    from cogworker_async.app import App

__all__ = ["AuthHook", "create_dashboard", "env_basic_auth", "serve"]

log = logging.getLogger(__name__)

AUTH_ENV: Final = environment.WEB_AUTH
"""``user:password`` for ``serve`` (and so the CLI): basic auth without code."""


def create_dashboard(
    jobs: App,
    *,
    auth: AuthHook | None = None,
    basic_auth: tuple[str, str] | None = None,
    title: str = "cogworker-async",
) -> Starlette:
    """The dashboard of ``jobs`` as a Starlette app, to mount anywhere (any prefix).

    - ``auth(request) -> bool`` (or an awaitable bool): your own check (a session, a
      header set by your proxy); False answers 401.
    - ``basic_auth=(user, password)``: HTTP basic auth (401 with ``WWW-Authenticate``).
      Both may be given: then both must pass. With neither, anyone who can reach the
      port can move and delete jobs — give one in production.
    """
    return _build(jobs, auth=auth, basic_auth=basic_auth, title=title, lifespan=None)


def _build(jobs: App, *, auth: AuthHook | None, basic_auth: tuple[str, str] | None,
           title: str, lifespan: Lifespan[Starlette] | None) -> Starlette:
    if basic_auth is not None and (len(basic_auth) != 2 or not all(basic_auth)):
        raise ValueError("basic_auth takes (username, password), both non-empty")
    site = Site(jobs, title=title)
    # Redis down or refusing (a wrong password, NOPERM, OOM) answers every page and
    # action with a 503 that says what Redis said, not a bare 500.
    app = Starlette(routes=routes.build(site), lifespan=lifespan,
                    middleware=[Middleware(Guard, auth=auth, basic_auth=basic_auth)],
                    exception_handlers={RedisError: site.unavailable})
    app.state.site = site  # the dashboard's own state, reachable from its app
    return app


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def env_basic_auth() -> tuple[str, str] | None:
    """``(user, password)`` from ``$COGWORKER_WEB_AUTH``; None when it is not set.

    Set but malformed (no colon, an empty user or password, an empty value) is a
    ``ConfigurationError``: read as "no auth", a typo would serve every job's data and
    actions to anyone who can reach the port while its owner believes it protected.
    The message says what is wrong and never shows the value (it may be the password).
    """
    value = environment.web_auth()
    if value is None:
        return None
    user, sep, password = value.partition(":")
    problem = ("is set but empty" if not value else
               "has no ':' between user and password" if not sep else
               "has an empty user name" if not user else
               "has an empty password" if not password else None)
    if problem is not None:
        raise ConfigurationError(f"{AUTH_ENV} {problem}: set it to user:password "
                                 "(or unset it to serve without authentication)")
    return user, password


def serve(app: App, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
          auth: AuthHook | None = None, basic_auth: tuple[str, str] | None = None) -> None:
    """Serve the dashboard with uvicorn until SIGINT/SIGTERM (what the CLI runs).

    Basic auth comes from ``basic_auth`` or ``$COGWORKER_WEB_AUTH`` (``user:password``);
    a malformed ``$COGWORKER_WEB_AUTH`` raises ``ConfigurationError`` before anything
    listens.
    """
    import uvicorn

    basic_auth = basic_auth or env_basic_auth()
    if not _is_loopback(host) and auth is None and basic_auth is None:
        log.warning("the dashboard listens on %s with no authentication: anyone who can "
                    "reach it can delete jobs (set %s=user:password)", host, AUTH_ENV)

    @asynccontextmanager
    async def closing(_: Starlette) -> AsyncIterator[None]:
        yield
        await app.close()  # this process's pools; the App is ours alone here

    dashboard = _build(app, auth=auth, basic_auth=basic_auth, title="cogworker-async",
                       lifespan=closing)
    uvicorn.run(dashboard, host=host, port=port, log_level=log_level)
