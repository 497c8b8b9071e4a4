"""The admin CLI on servers and data that are not as they should be: a Redis user
without INFO or CONFIG ("n/a"), a Redis that may evict jobs (a warning), stored text
that is not valid Unicode (a mark where the broken character was), and the dead set's
limits. Every command prints, in text and ``--json``, and exits 0."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any, Final

import pytest
import redis
from typer.testing import CliRunner

from cogworker_async.cli import cli
from cogworker_async.redis.keys import Keys
from tests.cli import adminapp, limitsapp
from tests.cli.conftest import invoke
from tests.servers import ServerProcess
from tests.web.broken_text import NOT_UTF8, REPLACED, store_broken

PASSWORD: Final = "s3cret-Pw"


@pytest.fixture
def server(jobs: adminapp.Jobs) -> Iterator[ServerProcess]:
    """A server of this test's own, reconfigured by it (the CLI's App on the test's
    namespace reaches it by ``--redis-url``)."""
    process = ServerProcess().start()
    yield process
    process.cleanup()


@pytest.fixture
def admin(server: ServerProcess) -> Iterator[redis.Redis]:
    client = redis.Redis(port=server.port)
    yield client
    client.close()


def stats(url: str, *args: str) -> tuple[str, dict[str, Any]]:
    """``stats`` as text and as JSON: both exit 0."""
    text = invoke("stats", "--redis-url", url, *args)
    assert text.exit_code == 0, text.output
    as_json = invoke("stats", "--redis-url", url, "--json", *args)
    assert as_json.exit_code == 0, as_json.output
    return text.stdout, json.loads(as_json.stdout)


# -- a Redis user without INFO or CONFIG ----------------------------------------------------


def test_stats_shows_n_a_for_what_a_limited_user_cannot_read(
        server: ServerProcess, admin: redis.Redis) -> None:
    admin.acl_setuser("limited", enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"],
                      channels=["*"], categories=["+@all"], commands=["-info", "-config"])
    url = f"redis://limited:{PASSWORD}@127.0.0.1:{server.port}/0"
    text, found = stats(url)
    assert re.search(r"^redis +n/a *$", text, re.MULTILINE), text
    assert re.search(r"^maxmemory-policy +n/a *$", text, re.MULTILINE), text
    assert set(found["server"].values()) == {None}
    assert found["maxmemory_policy"] is None
    assert found["eviction_warning"] is None


# -- a Redis that may evict jobs --------------------------------------------------------------


def test_stats_warns_when_redis_may_evict_jobs(server: ServerProcess,
                                               admin: redis.Redis) -> None:
    url = f"redis://127.0.0.1:{server.port}/0"
    quiet, calm = stats(url)
    assert "warning" not in quiet
    assert (calm["maxmemory_policy"], calm["eviction_warning"]) == ("noeviction", None)
    admin.config_set("maxmemory-policy", "allkeys-lru")
    text, found = stats(url)
    assert text.startswith("warning: Redis' maxmemory-policy is allkeys-lru")
    assert "Set maxmemory-policy to noeviction" in text
    assert found["maxmemory_policy"] == "allkeys-lru"
    assert "can evict" in found["eviction_warning"]


# -- stored text that is not valid Unicode ----------------------------------------------------


@pytest.fixture
def broken(jobs: adminapp.Jobs, redis_url: str, keys: Keys) -> Iterator[None]:
    client = redis.Redis.from_url(redis_url)
    store_broken(client, keys)
    yield
    client.close()


@pytest.mark.usefixtures("broken")
@pytest.mark.parametrize("command", [("queues", "default"), ("scheduled",), ("retries",),
                                     ("dead",), ("dead", "--search", "name")])
def test_entries_that_are_not_valid_unicode_are_listed(command: tuple[str, ...]) -> None:
    text = invoke(*command)
    assert text.exit_code == 0, text.output
    assert f"job{REPLACED}name" in text.stdout
    assert f"arg{REPLACED}x" in text.stdout
    as_json = invoke(*command, "--json")
    assert as_json.exit_code == 0, as_json.output
    items = json.loads(as_json.stdout)["items"]
    [job] = [item for item in items if item["jid"] is not None and "raw_base64" not in item]
    assert (job["class"], job["args"]) == (f"job{REPLACED}name", [f"arg{REPLACED}x"])
    assert job["kwargs"] == {f"key{REPLACED}": f"value{REPLACED}"}
    if command[0] in ("retries", "dead"):  # the tables with an error column
        assert f"message{REPLACED}y" in text.stdout
        assert job["error_message"] == f"message{REPLACED}y"
    if "--search" not in command:
        [raw] = [item for item in items if "raw_base64" in item]
        assert base64.b64decode(raw["raw_base64"]) == NOT_UTF8  # the exact bytes
        assert f"raw {REPLACED}{REPLACED} bytes" in text.stdout


@pytest.mark.usefixtures("broken")
@pytest.mark.parametrize("command", ["queues", "processes", "stats"])
def test_summaries_over_text_that_is_not_valid_unicode_print(command: str) -> None:
    text = invoke(command)
    assert text.exit_code == 0, text.output
    as_json = invoke(command, "--json")
    assert as_json.exit_code == 0, as_json.output
    json.loads(as_json.stdout)
    if command == "processes":
        assert f"host{REPLACED}" in text.stdout
        assert f"who{REPLACED}" in text.stdout


# -- the dead set's limits -------------------------------------------------------------------


@pytest.mark.usefixtures("jobs")
def test_stats_shows_the_dead_set_limits() -> None:
    text = CliRunner().invoke(cli, ["stats", limitsapp.TARGET])
    assert text.exit_code == 0, text.output
    assert re.search(r"^dead limits +1,234 jobs, 7d each *$", text.stdout, re.MULTILINE), \
        text.stdout
    as_json = CliRunner().invoke(cli, ["stats", limitsapp.TARGET, "--json"])
    assert as_json.exit_code == 0, as_json.output
    found = json.loads(as_json.stdout)
    assert (found["dead_max_jobs"], found["dead_max_age"]) == (1234, 7 * 86_400.0)
