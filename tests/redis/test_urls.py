"""Redis URLs: passwords never shown, schemes in any letter case."""

from __future__ import annotations

import pytest

from cogworker_async import App
from cogworker_async.errors import ConfigurationError
from cogworker_async.redis.urls import check, mask

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
    (f"redis+sentinel://u:{SECRET}@h1:26379,h2:26379/svc?sentinel_password={SECRET}",
     "redis+sentinel://u:***@h1:26379,h2:26379/svc?sentinel_password=***"),
])
def test_mask_hides_the_password_and_nothing_else(url: str, shown: str) -> None:
    assert mask(url) == shown
    assert mask(mask(url)) == shown


def test_an_unsupported_url_is_refused_without_its_password() -> None:
    jobs = App(f"memcached://:{SECRET}@h1:11211/0")
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


@pytest.mark.parametrize(("url", "secret"), [
    ("redis://default:abc/def+ghi=@host:6379/0", "abc/def"),   # a base64-ish secret
    ("redis://u:p?ss#w@rd@host/0", "p?ss"),                     # '?', '#' and '@' in it
    ("redis:/u:s3cret@h", "s3cret"),                            # a slash missing
    ("rediss://user:se/cret@h:1?ssl_ca_certs=/ca.pem", "se/cret"),
])
def test_a_password_with_reserved_characters_is_still_masked(url: str, secret: str) -> None:
    assert secret not in mask(url)
    with pytest.raises(ConfigurationError) as refused:
        check(url)
    assert secret not in str(refused.value)
