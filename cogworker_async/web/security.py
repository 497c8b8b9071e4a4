"""What keeps the dashboard safe to expose: who may look (the auth hook), and which
requests may change anything (CSRF token and same-origin check on every POST).

A dashboard moves and deletes jobs, so a page on another site must not be able to make
a logged-in browser do it. Two independent defences, either of which stops that:

- **Same origin.** A browser says where a request comes from: ``Sec-Fetch-Site``
  (``same-origin``, or ``none`` when the user typed the URL) and ``Origin``. A POST that
  says it comes from elsewhere is refused, whatever else it carries.
- **Double-submit token.** Every page sets a random token in a cookie (``HttpOnly``,
  ``SameSite=Strict``, scoped to the dashboard's path) and writes the same token into
  its forms. Another site can neither read the cookie nor guess the token, so it cannot
  build a form whose field matches it; the two are compared in constant time.

GET never changes anything (actions are POST-only routes), so none of this is needed
for reading. Auth runs before everything, static files included.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import urlsplit

from starlette.datastructures import FormData, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

AuthHook = Callable[[Request], bool | Awaitable[bool]]
"""``auth(request) -> bool`` (or awaitable): True lets the request through."""

CSRF_COOKIE: Final = "cogworker_csrf"
CSRF_FIELD: Final = "csrf_token"
TOKEN_BYTES: Final = 32
MAX_FORM_FIELDS: Final = 1000
"""Fields one POST may carry: a selection is at most a page of checkboxes."""
REALM: Final = "cogworker-async"
ALLOWED_FETCH_SITES: Final = frozenset({"same-origin", "none"})

# Sent with every response. The pages use no inline script or style, so the policy can
# forbid both: an argument that slipped past escaping still could not run.
SECURITY_HEADERS: Final = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; form-action 'self'; base-uri 'none'; "
                               "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}


# -- auth ------------------------------------------------------------------------------


def basic_auth_ok(request: Request, username: str, password: str) -> bool:
    """Does the request carry these credentials (compared in constant time)?"""
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(encoded, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    user, sep, secret = given.partition(":")
    # Both compared, always: how long a refusal takes says nothing about which was wrong.
    user_ok = hmac.compare_digest(user.encode(), username.encode())
    secret_ok = hmac.compare_digest(secret.encode(), password.encode())
    return bool(sep) and user_ok and secret_ok


class Guard:
    """ASGI middleware: the auth hook and basic auth in front of every request, and the
    security headers on every response."""

    def __init__(self, app: ASGIApp, *, auth: AuthHook | None,
                 basic_auth: tuple[str, str] | None) -> None:
        self.app = app
        self.auth = auth
        self.basic_auth = basic_auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        refusal = await self._refusal(Request(scope))
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    async def _refusal(self, request: Request) -> Response | None:
        if self.basic_auth is not None and not basic_auth_ok(request, *self.basic_auth):
            return PlainTextResponse("Authentication required.", 401,
                                     headers={"WWW-Authenticate": f'Basic realm="{REALM}"'})
        if self.auth is not None:
            verdict = self.auth(request)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if not verdict:
                return PlainTextResponse("Not allowed.", 401)
        return None


# -- CSRF ------------------------------------------------------------------------------


def cookie_path(request: Request) -> str:
    """The dashboard's own path: its cookie is not sent to the rest of the site, and two
    dashboards mounted side by side keep their tokens apart."""
    return request.scope.get("root_path", "").rstrip("/") or "/"


def cookie_name(request: Request) -> str:
    """The token cookie's name, distinct per mount path: a dashboard at ``/`` and another
    at ``/jobs`` would otherwise both send a cookie of the same name to ``/jobs``."""
    path = cookie_path(request)
    if path == "/":
        return CSRF_COOKIE
    return f"{CSRF_COOKIE}_{hashlib.sha256(path.encode()).hexdigest()[:8]}"


def csrf_token(request: Request) -> tuple[str, bool]:
    """The token for the page being rendered, and whether it is new (to be set)."""
    current = request.cookies.get(cookie_name(request), "")
    if len(current) >= TOKEN_BYTES and current.isascii():
        return current, False
    return secrets.token_urlsafe(TOKEN_BYTES), True


def set_csrf_cookie(response: Response, request: Request, token: str) -> None:
    response.set_cookie(cookie_name(request), token, path=cookie_path(request), httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")


def same_origin_refusal(request: Request) -> str | None:
    """Why the request looks cross-site, or None."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ALLOWED_FETCH_SITES:
        return f"cross-site request refused (Sec-Fetch-Site: {site})"
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "")
        if origin == "null" or urlsplit(origin).netloc.lower() != host.lower():
            return "cross-origin request refused (Origin does not match Host)"
    return None


async def verified_form(request: Request) -> FormData:
    """The POSTed form, once the request is shown to come from this dashboard's own
    pages; otherwise 403 with the reason."""
    reason = same_origin_refusal(request)
    if reason is not None:
        raise HTTPException(403, f"Forbidden: {reason}.")
    form = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS)
    cookie = request.cookies.get(cookie_name(request), "")
    field = form.get(CSRF_FIELD)
    if not cookie or not isinstance(field, str) or not hmac.compare_digest(
            cookie.encode(), field.encode()):
        raise HTTPException(403, "Forbidden: missing or wrong CSRF token "
                                 "(reload the page and try again).")
    return form
