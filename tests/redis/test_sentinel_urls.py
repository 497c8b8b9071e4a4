"""``redis+sentinel://`` URLs: what each part means, and every malformed one refused with
an error that names the fix and never shows a password."""

from __future__ import annotations

import pytest

from cogworker_async.errors import ConfigurationError
from cogworker_async.redis.durability import Durability, NotDurable
from cogworker_async.redis.urls import SentinelURL, check, mask, sentinel_url

SECRET = "s3cr3t-pw"


def test_the_parts_of_a_sentinel_url() -> None:
    parsed = sentinel_url(
        f"redis+sentinel://app:{SECRET}@s1:26379,[::1]:26380/orders/3"
        f"?sentinel_username=watch&sentinel_password={SECRET}x")
    assert parsed == SentinelURL(
        sentinels=(("s1", 26379), ("::1", 26380)), service="orders", db=3,
        username="app", password=SECRET, sentinel_username="watch",
        sentinel_password=f"{SECRET}x", tls=False, options={})


def test_tls_options_go_with_rediss_only() -> None:
    parsed = sentinel_url("rediss+sentinel://s1:26379/orders?ssl_ca_certs=/ca.pem")
    assert parsed.tls
    assert parsed.options == {"ssl_ca_certs": "/ca.pem"}
    with pytest.raises(ConfigurationError, match=r"use rediss\+sentinel://"):
        check("redis+sentinel://s1:26379/orders?ssl_ca_certs=/ca.pem")


def test_the_database_defaults_to_0_and_credentials_may_be_query_parameters() -> None:
    parsed = sentinel_url(f"redis+sentinel://s1:26379/orders?username=u&password={SECRET}")
    assert (parsed.db, parsed.username, parsed.password) == (0, "u", SECRET)


@pytest.mark.parametrize(("url", "says"), [
    (f"redis+sentinel://:{SECRET}@s1:26379", "name the master's service"),
    (f"redis+sentinel://:{SECRET}@s1:26379/orders/x", "database number"),
    (f"redis+sentinel://:{SECRET}@s1/orders", "list the sentinels as host:port"),
    (f"redis+sentinel://:{SECRET}@s1:26379/orders?timeout=1", "unknown option 'timeout'"),
])
def test_a_malformed_sentinel_url_is_refused_without_its_password(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says) as refused:
        check(url)
    assert SECRET not in str(refused.value)


def test_the_sentinels_password_is_masked_too() -> None:
    url = f"redis+sentinel://s1:26379/orders?sentinel_password={SECRET}&password={SECRET}"
    assert SECRET not in mask(url)
    assert mask(url) == "redis+sentinel://s1:26379/orders?sentinel_password=***&password=***"


def test_scheme_case_is_folded() -> None:
    assert check("REDISS+Sentinel://s1:26379/orders") == "rediss+sentinel://s1:26379/orders"


@pytest.mark.parametrize(("durability", "command"), [
    (Durability("replica", 0.25), (b"WAIT", 1, 250)),
    (Durability("aof", 2.0), (b"WAITAOF", 1, 0, 2000)),
])
def test_what_each_durability_waits_for(durability: Durability, command: tuple[object, ...],
                                       ) -> None:
    assert durability.command == command


@pytest.mark.parametrize(("durability", "reply", "confirmed"), [
    (Durability("replica"), 1, True), (Durability("replica"), 2, True),
    (Durability("replica"), 0, False),
    (Durability("aof"), [1, 0], True), (Durability("aof"), [0, 1], False),
])
def test_a_confirmation_counts_the_copies_asked_for(
    durability: Durability, reply: object, confirmed: bool,
) -> None:
    if confirmed:
        durability.check(reply)
    else:
        with pytest.raises(NotDurable, match="may be lost if the master fails now"):
            durability.check(reply)
