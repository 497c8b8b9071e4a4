"""Safe by default: no change without the token from a same-origin page, none on GET,
and the auth hooks refuse and allow."""

from __future__ import annotations

import base64

import httpx
import pytest
from starlette.requests import Request

from cogworker_async.web import create_dashboard
from tests.web.conftest import BASE_URL, Board, page_token


async def test_a_post_without_the_token_is_refused_and_changes_nothing(
        board: Board, client: httpx.AsyncClient) -> None:
    await board.dead_from("kept")
    await page_token(client, "/dead")  # the browser has its cookie, but no form field
    response = await client.post("/dead/delete", data={"all": "1"})
    assert response.status_code == 403
    assert "CSRF token" in response.text
    assert await board.inspector.dead.size() == 1


async def test_a_wrong_token_or_no_cookie_is_refused(board: Board,
                                                     client: httpx.AsyncClient) -> None:
    await board.dead_from("kept")
    token = await page_token(client, "/dead")
    wrong = await client.post("/dead/delete", data={"all": "1", "csrf_token": token[:-1] + "x"})
    assert wrong.status_code == 403
    client.cookies.clear()
    no_cookie = await client.post("/dead/delete", data={"all": "1", "csrf_token": token})
    assert no_cookie.status_code == 403
    assert await board.inspector.dead.size() == 1


@pytest.mark.parametrize(("header", "value"), [
    ("Sec-Fetch-Site", "cross-site"),
    ("Sec-Fetch-Site", "same-site"),
    ("Origin", "http://evil.example"),
    ("Origin", "null"),
])
async def test_a_cross_site_post_is_refused_even_with_the_token(
        board: Board, client: httpx.AsyncClient, header: str, value: str) -> None:
    await board.dead_from("kept")
    token = await page_token(client, "/dead")
    response = await client.post("/dead/delete", data={"all": "1", "csrf_token": token},
                                 headers={header: value})
    assert response.status_code == 403
    assert "refused" in response.text
    assert await board.inspector.dead.size() == 1


async def test_a_same_origin_post_passes(board: Board, client: httpx.AsyncClient) -> None:
    await board.dead_from("gone")
    token = await page_token(client, "/dead")
    response = await client.post("/dead/delete", data={"all": "1", "csrf_token": token},
                                 headers={"Sec-Fetch-Site": "same-origin", "Origin": BASE_URL})
    assert response.status_code == 303
    assert await board.inspector.dead.size() == 0


@pytest.mark.parametrize("path", ["/dead/retry", "/dead/delete", "/retries/kill",
                                  "/scheduled/retry", "/queues/default/delete",
                                  "/queues/default/clear"])
async def test_get_of_an_action_url_is_405_and_changes_nothing(
        board: Board, client: httpx.AsyncClient, path: str) -> None:
    await board.dead_from("kept")
    await board.ok.enqueue("queued")
    response = await client.get(path, params={"all": "1", "token": "x"})
    assert response.status_code == 405
    assert await board.inspector.dead.size() == 1
    assert (await board.inspector.queue("default").info()).size == 1


async def test_the_csrf_cookie_is_http_only_strict_and_scoped(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    cookie = response.headers["set-cookie"].lower()
    assert "cogworker_csrf=" in cookie
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "path=/" in cookie
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    # The cookie is kept, not replaced, on the next page.
    assert "set-cookie" not in (await client.get("/queues")).headers


def basic(user: str, password: str) -> dict[str, str]:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}


async def test_basic_auth_refuses_then_allows(board: Board) -> None:
    dashboard = create_dashboard(board.app, basic_auth=("admin", "s3cret"))
    transport = httpx.ASGITransport(app=dashboard)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        anonymous = await http.get("/")
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"] == 'Basic realm="cogworker-async"'
        assert (await http.get("/", headers=basic("admin", "wrong"))).status_code == 401
        assert (await http.get("/static/dashboard.css")).status_code == 401
        allowed = await http.get("/", headers=basic("admin", "s3cret"))
        assert allowed.status_code == 200
        assert "Dashboard" in allowed.text


@pytest.mark.parametrize("is_async", [False, True])
async def test_the_auth_callable_refuses_then_allows(board: Board, is_async: bool) -> None:
    def sync_check(request: Request) -> bool:
        return request.headers.get("x-user") == "ops"

    async def async_check(request: Request) -> bool:
        return sync_check(request)

    dashboard = create_dashboard(board.app, auth=async_check if is_async else sync_check)
    transport = httpx.ASGITransport(app=dashboard)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        refused = await http.get("/dead")
        assert refused.status_code == 401
        assert "www-authenticate" not in refused.headers
        assert (await http.get("/dead", headers={"x-user": "ops"})).status_code == 200


def test_basic_auth_needs_both_parts(board: Board) -> None:
    with pytest.raises(ValueError, match="basic_auth"):
        create_dashboard(board.app, basic_auth=("admin", ""))
