"""Redis URLs: passwords never shown, schemes in any letter case."""

from __future__ import annotations

import pytest

from cogworker_async import App
from cogworker_async.errors import ConfigurationError
from cogworker_async.urls import check, mask

SECRET = "s3cr:et"


@pytest.mark.parametrize(("url", "shown"), [
    (f"redis+sentinel://:{SECRET}@h1:26379,h2:26379/mymaster",
     "redis+sentinel://:***@h1:26379,h2:26379/mymaster"),
    (f"redis://user:{SECRET}@host:6379/0", "redis://user:***@host:6379/0"),
    (f"rediss://user:{SECRET}@host/0?ssl_ca_certs=/ca.pem",
     "rediss://user:***@host/0?ssl_ca_certs=/ca.pem"),
    (f"redis://host/0?password={SECRET}&db=1", "redis://host/0?password=***&db=1"),
    (f"unix:///run/redis.sock?password={SECRET}", "unix:///run/redis.sock?password=***"),
    ("redis://user@host:6379", "redis://user@host:6379"),
    ("redis://host:6379/0", "redis://host:6379/0"),
])
def test_mask_hides_the_password_and_nothing_else(url: str, shown: str) -> None:
    assert mask(url) == shown
    assert mask(mask(url)) == shown


def test_an_unsupported_url_is_refused_without_its_password() -> None:
    jobs = App(f"redis+sentinel://:{SECRET}@h1:26379/mymaster")
    with pytest.raises(ConfigurationError) as refused:
        jobs.redis_url()
    assert SECRET not in str(refused.value)
    assert "***" in str(refused.value)


@pytest.mark.parametrize("url", ["REDIS://h:1/0", "Rediss://h:1", "UNIX:///tmp/r.sock"])
def test_schemes_are_case_insensitive(url: str) -> None:
    checked = check(url)
    assert checked.split("://")[0] == url.split("://")[0].lower()
    assert checked.split("://")[1] == url.split("://")[1]
    assert App(url).redis_url() == checked
