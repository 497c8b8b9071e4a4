"""The dashboard when things are not as they should be: auth that is set but malformed,
Redis down or refusing, a Redis user without INFO or CONFIG, a Redis that may evict
jobs, stored text that is not valid Unicode. Each answer is one a person can read:
a refusal to start, a 503 that says what Redis said, "n/a", a banner, a mark where the
broken character was — never a 500 and never a silently unprotected dashboard."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final

import httpx
import pytest
import redis

from cogworker_async import App
from cogworker_async.admin import Inspector
from cogworker_async.errors import ConfigurationError
from cogworker_async.redis.keys import Keys
from cogworker_async.web import AUTH_ENV, create_dashboard, env_basic_auth
from tests.conftest import FAST
from tests.servers import ServerProcess
from tests.web.broken_text import REPLACED, store_broken
from tests.web.conftest import BASE_URL, Board, page_token, rows

PAGES: Final = ("/", "/queues", "/queues/default", "/busy", "/scheduled", "/retries",
                "/dead", "/periodic")
"""Every GET page of the dashboard (the job pages need an entry: tested apart)."""
PASSWORD: Final = "s3cret-Pw"
NAMESPACE: Final = "hardening"


# -- 1. auth that is set but malformed ----------------------------------------------------


@pytest.mark.parametrize("pair", [("admin", ""), ("", "pw"), ("", "")])
def test_basic_auth_with_an_empty_half_is_refused(pair: tuple[str, str],
                                                  make_app: Callable[..., App]) -> None:
    with pytest.raises(ValueError, match="both non-empty"):
        create_dashboard(make_app(), basic_auth=pair)


@pytest.mark.parametrize(("value", "problem"), [
    ("hunter2secret", "no ':'"), ("admin:", "empty password"), (":hunter2secret", "empty user"),
    ("", "set but empty")])
def test_a_malformed_auth_variable_is_an_error_that_does_not_show_it(
        value: str, problem: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AUTH_ENV, value)
    with pytest.raises(ConfigurationError, match=problem) as caught:
        env_basic_auth()
    assert "hunter2secret" not in str(caught.value)


def test_the_auth_variable_unset_or_well_formed_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUTH_ENV, raising=False)
    assert env_basic_auth() is None
    monkeypatch.setenv(AUTH_ENV, "admin:pa:ss")
    assert env_basic_auth() == ("admin", "pa:ss")


# -- private servers ------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    """A server of this test's own: it is stopped, locked or reconfigured."""
    process = ServerProcess().start()
    yield process
    process.cleanup()


@pytest.fixture
def admin(server: ServerProcess) -> Iterator[redis.Redis]:
    """The server's default user, for setting it up (before any password is set)."""
    client = redis.Redis(port=server.port)
    yield client
    client.close()


@pytest.fixture
async def apps() -> AsyncIterator[Callable[[str], App]]:
    made: list[App] = []

    def make(url: str) -> App:
        app = App(url, namespace=NAMESPACE, **FAST)
        made.append(app)
        return app

    yield make
    for app in made:
        await app.close()


def http(app: App) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_dashboard(app))
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL)


def url_of(server: ServerProcess, user: str = "", password: str = "") -> str:
    credentials = f"{user}:{password}@" if password else ""
    return f"redis://{credentials}127.0.0.1:{server.port}/0"


def assert_unavailable(response: httpx.Response, headline: str, said: str) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert headline in response.text
    assert said in response.text
    assert PASSWORD not in response.text
    assert "***@127.0.0.1" in response.text  # where: the URL, its password masked


# -- 2. Redis down or refusing: a readable 503 --------------------------------------------


async def test_every_page_says_redis_is_unreachable_once_it_stops(
        server: ServerProcess, admin: redis.Redis, apps: Callable[[str], App]) -> None:
    admin.config_set("requirepass", PASSWORD)
    app = apps(url_of(server, password=PASSWORD))
    async with http(app) as client:
        assert (await client.get("/")).status_code == 200
        server.stop()
        for path in PAGES:
            assert_unavailable(await client.get(path), "Redis is unreachable",
                               "ConnectionError")
        graph = await client.get("/stats.json")
        assert graph.status_code == 503
        assert "Redis is unreachable" in graph.json()["error"]


async def test_every_page_says_redis_refuses_a_wrong_password(
        server: ServerProcess, admin: redis.Redis, apps: Callable[[str], App]) -> None:
    admin.config_set("requirepass", "the-right-one")
    async with http(apps(url_of(server, password=PASSWORD))) as client:
        for path in PAGES:
            assert_unavailable(await client.get(path), "Redis refuses",
                               "invalid username-password pair")


async def test_every_page_says_redis_refuses_a_user_without_the_keys(
        server: ServerProcess, admin: redis.Redis, apps: Callable[[str], App]) -> None:
    admin.acl_setuser("outsider", enabled=True, passwords=[f"+{PASSWORD}"],
                      keys=["other:*"], categories=["+@all"])
    async with http(apps(url_of(server, "outsider", PASSWORD))) as client:
        for path in PAGES:
            assert_unavailable(await client.get(path), "Redis refuses", "NoPermissionError")


async def test_an_action_refused_for_lack_of_memory_says_so_and_keeps_the_job(
        server: ServerProcess, admin: redis.Redis, apps: Callable[[str], App]) -> None:
    admin.config_set("requirepass", PASSWORD)  # the connection made before stays logged in
    app = apps(url_of(server, password=PASSWORD))
    entry = json.dumps({"jid": "j1", "class": "web.ok", "queue": "default", "args": []})
    admin.zadd(Keys(NAMESPACE).retry("default"), {entry: 1.0})
    async with http(app) as client:
        form_token = await page_token(client, "/retries")
        [record] = (await Inspector(app).retries.page()).items
        admin.config_set("maxmemory", "1")  # every write that may grow memory: OOM
        response = await client.post("/retries/kill", data={"csrf_token": form_token,
                                                            "token": record.token})
        assert_unavailable(response, "Redis refuses", "OutOfMemoryError")
        admin.config_set("maxmemory", "0")
        assert rows((await client.get("/retries")).text) == 1  # still there, not lost


# -- 3. a Redis user without INFO or CONFIG: "n/a" ----------------------------------------


async def test_a_user_without_info_or_config_sees_every_page_with_n_a(
        server: ServerProcess, admin: redis.Redis, apps: Callable[[str], App]) -> None:
    admin.acl_setuser("limited", enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"],
                      channels=["*"], categories=["+@all"], commands=["-info", "-config"])
    async with http(apps(url_of(server, "limited", PASSWORD))) as client:
        for path in PAGES:
            response = await client.get(path)
            assert response.status_code == 200, (path, response.text)
        home = (await client.get("/")).text
        assert "<dt>Server</dt><dd>n/a" in home
        assert "<dt>Eviction</dt><dd>n/a</dd>" in home


# -- 4. a Redis that may evict jobs: a banner on every page -------------------------------


async def test_every_page_warns_when_redis_may_evict_jobs(
        server: ServerProcess, admin: redis.Redis, apps: Callable[[str], App]) -> None:
    async with http(apps(url_of(server))) as client:
        assert 'class="banner"' not in (await client.get("/")).text  # noeviction: quiet
        admin.config_set("maxmemory-policy", "allkeys-lru")
        for path in PAGES:
            html = (await client.get(path)).text
            assert 'class="banner" role="alert"' in html, path
            assert "maxmemory-policy is allkeys-lru" in html
            assert "Set maxmemory-policy to noeviction" in html


async def test_the_eviction_warning_reads_the_policy_from_info_or_config(
        server: ServerProcess, admin: redis.Redis, apps: Callable[[str], App]) -> None:
    # Managed servers refuse CONFIG but report the policy in INFO; a user may be given
    # CONFIG and not INFO. Either one is enough to warn.
    admin.config_set("maxmemory-policy", "volatile-ttl")
    for user, denied in (("noconfig", "-config"), ("noinfo", "-info")):
        admin.acl_setuser(user, enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"],
                          channels=["*"], categories=["+@all"], commands=[denied])
        async with http(apps(url_of(server, user, PASSWORD))) as client:
            html = (await client.get("/queues")).text
        assert "maxmemory-policy is volatile-ttl" in html, user


# -- 5. stored text that is not valid Unicode ---------------------------------------------


@pytest.fixture
def broken(board: Board, redis_url: str, keys: Keys) -> Iterator[None]:
    client = redis.Redis.from_url(redis_url)
    store_broken(client, keys)
    yield
    client.close()


def readable(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.content.decode("utf-8")  # strict: every byte is UTF-8


@pytest.mark.usefixtures("broken")
async def test_every_page_renders_text_that_is_not_valid_unicode(
        client: httpx.AsyncClient) -> None:
    for path in PAGES:
        readable(await client.get(path))
    for path in ("/queues/default", "/scheduled", "/retries", "/dead"):
        html = readable(await client.get(path))
        assert rows(html) == 2, path
        assert f"job{REPLACED}name" in html, path
        assert f"arg{REPLACED}x" in html, path
        assert f"raw {REPLACED}{REPLACED} bytes" in html, path
    busy = readable(await client.get("/busy"))
    assert f"host{REPLACED}" in busy
    assert f"who{REPLACED}" in busy
    found = readable(await client.get("/dead?q=name"))
    assert f"job{REPLACED}name" in found


@pytest.mark.usefixtures("broken")
async def test_every_job_page_renders_text_that_is_not_valid_unicode(
        board: Board, client: httpx.AsyncClient) -> None:
    for kind in ("scheduled", "retries", "dead"):
        records = (await board.inspector.job_set(kind).page()).items
        assert len(records) == 2
        for record in records:
            html = readable(await client.get(f"/{kind}/job/{record.token}"))
            if record.payload is None:
                assert f"raw {REPLACED}{REPLACED} bytes" in html
                continue
            for shown in (f"job{REPLACED}name", f"arg{REPLACED}x", f"value{REPLACED}",
                          f"message{REPLACED}y", f"line{REPLACED}", f"jid{REPLACED}"):
                assert shown in html, (kind, shown)


# -- 6. the dead set's limits -------------------------------------------------------------


async def test_the_dead_tab_shows_the_dead_set_limits(make_app: Callable[..., Any]) -> None:
    app = make_app(dead_max_jobs=1234, dead_max_age=7 * 86400.0)
    async with http(app) as client:
        html = readable(await client.get("/dead"))
    assert "Dead keeps at most 1,234 jobs, each for 7 d" in html
