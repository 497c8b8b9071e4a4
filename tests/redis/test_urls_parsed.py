"""Redis URLs as people write them: ``mask`` never shows the password and changes
nothing else, and ``check`` takes exactly redis://, rediss:// and unix:// (and the
cluster and sentinel schemes, whose URLs have rules of their own:
tests/redis/test_cluster_urls.py, tests/redis/test_sentinel_urls.py)
in any letter case, and never shows the password when it refuses one.

URLs are built from parts, so that the expected masked form is known exactly: the same
URL with ``***`` in place of the password.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from cogworker_async.errors import ConfigurationError
from cogworker_async.redis.urls import (
    CLUSTER_SCHEMES,
    MASK,
    PLAIN_OPTIONS,
    SCHEMES,
    SENTINEL_SCHEMES,
    check,
    mask,
)

SECRET_KEYS: Final = ("password", "pass", "pwd", "auth")
"""Query parameters that carry a password (any letter case)."""
ENDS_USERINFO: Final = "@/?#"
"""After the first of these, a password would not be in the userinfo any more."""


def text_without(excluded: str, *, min_size: int = 0) -> st.SearchStrategy[str]:
    """Printable text (any script, spaces included) without ``excluded``."""
    chars = st.characters(exclude_categories=("Cc", "Cs"), exclude_characters=excluded)
    return st.text(chars, min_size=min_size, max_size=16)


def any_case(word: str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.sampled_from([c.lower(), c.upper()]) for c in word)).map("".join)


ACCEPTED: Final = st.sampled_from(SCHEMES).flatmap(any_case)
SINGLE_NODE: Final = st.sampled_from(
    [s for s in SCHEMES if s not in CLUSTER_SCHEMES + SENTINEL_SCHEMES]).flatmap(any_case)
"""redis://, rediss:// and unix://: one server, read as redis-py reads it."""
REFUSED: Final = st.one_of(
    st.sampled_from(["http", "redis+sentinels", "rediss+tls", "valkey", "unixx", "re-dis",
                     "redi", "s", "tcp"]).flatmap(any_case),
    st.from_regex(r"[A-Za-z][A-Za-z0-9+.\-]{0,10}", fullmatch=True).filter(
        lambda s: s.lower() not in SCHEMES),
)
HOST: Final = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9.\-]{0,20}", fullmatch=True),
    st.sampled_from(["[::1]", "127.0.0.1", "localhost", "redis.example.com"]),
)
HOSTS: Final = st.lists(
    st.builds(lambda host, port: host + (f":{port}" if port is not None else ""),
              HOST, st.none() | st.integers(0, 65535)),
    min_size=1, max_size=3).map(",".join)
PATH: Final = st.one_of(st.just(""), st.integers(0, 15).map(lambda db: f"/{db}"),
                        text_without("?#@").map(lambda p: "/" + p))
"""No ``@`` after the userinfo: ``mask`` takes the userinfo to end at the LAST ``@`` (a
password may hold one unencoded), so a later one makes it mask more: see the test
``test_an_at_sign_after_the_host_masks_more_never_less``."""
QUERY_KEY: Final = text_without("=&#", min_size=1).filter(
    lambda k: k.lower() not in SECRET_KEYS)
QUERY_VALUE: Final = text_without("&#?@")
"""A value holding ``?`` could hold ``?pass=``, which ``mask`` reads as a parameter."""
PASSWORD: Final = text_without(ENDS_USERINFO, min_size=1)
"""Any printable text that stays in the userinfo: ':' included."""
QUERY_PASSWORD: Final = text_without("&#", min_size=1)


@dataclass(frozen=True, slots=True)
class Url:
    scheme: str
    user: str | None
    """None: no userinfo at all."""
    password: str | None
    """In the userinfo (``user:password@``)."""
    hosts: str
    path: str
    query: list[tuple[str, str]]
    query_password: tuple[str, str] | None = None
    """(key, value): ``?password=value``, placed first in the query."""

    def __str__(self) -> str:
        userinfo = ""
        if self.user is not None or self.password is not None:
            userinfo = (self.user or "") + (f":{self.password}" if self.password else "") + "@"
        pairs = ([self.query_password] if self.query_password else []) + self.query
        query = "?" + "&".join(f"{k}={v}" for k, v in pairs) if pairs else ""
        return f"{self.scheme}://{userinfo}{self.hosts}{self.path}{query}"

    def masked(self) -> Url:
        """The same URL with ``***`` wherever a password is."""
        secret = self.query_password
        return replace(self, password=MASK if self.password else None,
                       query_password=(secret[0], MASK) if secret else None)

    @property
    def secrets(self) -> list[str]:
        return [s for s in (self.password, self.query_password and self.query_password[1])
                if s]


def urls(scheme: st.SearchStrategy[str], *, secret: bool) -> st.SearchStrategy[Url]:
    user = st.none() | text_without(ENDS_USERINFO + ":")
    query = st.lists(st.tuples(QUERY_KEY, QUERY_VALUE), max_size=3)
    if not secret:
        return st.builds(Url, scheme, user, st.none(), HOSTS, PATH, query)
    in_query = st.tuples(st.sampled_from(SECRET_KEYS).flatmap(any_case), QUERY_PASSWORD)
    return st.one_of(
        st.builds(Url, scheme, user, PASSWORD, HOSTS, PATH, query),
        st.builds(Url, scheme, user, st.none(), HOSTS, PATH, query, in_query),
        st.builds(Url, scheme, user, PASSWORD, HOSTS, PATH, query, in_query),
    )


ANY_SCHEME: Final = ACCEPTED | REFUSED


@given(url=urls(ANY_SCHEME, secret=True))
@example(url=Url("redis", "u", "p:a:ss", "h1:1,h2:2", "/0", []))
@example(url=Url("unix", None, "s3cr:et", "", "/run/redis.sock", [("db", "0")],
                 ("PassWord", "x=y")))
@example(url=Url("redis", "", ":", "[::1]:6379", "", []))
@example(url=Url("rediss+cluster", "u", "p@ss:w", "[::1]:7000,h2:7001,10.0.0.3:7002", "/0",
                 [("ssl_ca_certs", "/etc/ca.pem")], ("password", "q:s")))
@example(url=Url("REDIS+CLUSTER", None, None, "h1:7000,h2:7001", "", [], ("PASSWORD", "x")))
def test_mask_replaces_the_password_and_nothing_else(url: Url) -> None:
    shown = mask(str(url))
    assert shown == str(url.masked())
    expected = str(url.masked())
    for secret in url.secrets:
        if secret not in expected:  # else it is also a host, a user name, a path...
            assert secret not in shown


@given(url=urls(ANY_SCHEME, secret=False))
def test_mask_leaves_a_url_without_a_password_unchanged(url: Url) -> None:
    assert mask(str(url)) == str(url)


@given(text=st.one_of(urls(ANY_SCHEME, secret=True).map(str), st.text()))
@example(text="a:b@c@d")
@example(text="x:@@?auth=&pwd=1#pass=2")
def test_mask_is_idempotent(text: str) -> None:
    assert mask(mask(text)) == mask(text)


def one_host(url: Url) -> bool:
    """A URL redis-py can connect to: one host (several are Sentinel's or Cluster's)."""
    return "," not in url.hosts


@given(url=(urls(SINGLE_NODE, secret=True) | urls(SINGLE_NODE, secret=False)).filter(one_host))
@example(url=Url("REDIS", None, None, "h", "/0", []))
@example(url=Url("UnIx", None, None, "", "/tmp/r.sock", []))
def test_check_accepts_the_three_schemes_in_any_case_and_lowers_them(url: Url) -> None:
    text = str(url)
    try:
        urlsplit(text).port  # noqa: B018 - what redis-py's own parsing would refuse
    except ValueError:  # e.g. a password holding '[': refused, password masked
        with pytest.raises(ConfigurationError, match="malformed") as refused:
            check(text)
        assert all(s not in str(refused.value) for s in url.secrets
                   if s not in str(url.masked()))
        return
    if _overrides_or_bad_db(text):  # issue 25: a query option may not override the
        # client's own settings, and a database is a number; refused, password masked
        with pytest.raises(ConfigurationError, match=r"unknown option|must be a number") \
                as refused:
            check(text)
        # The URL it shows is the masked one (mask's own tests cover what it hides).
        assert repr(mask(text)) in str(refused.value)
        return
    assert check(text) == url.scheme.lower() + text[len(url.scheme):]


def _overrides_or_bad_db(text: str) -> bool:
    """Would ``check`` refuse a plain URL's query (a key outside ``PLAIN_OPTIONS``, a
    ``db`` that is not a number) or its path's database?"""
    parts = urlsplit(text)
    options = parse_qs(parts.query, keep_blank_values=True)
    dbs = list(options.get("db", [])[-1:])
    if not text.lower().startswith("unix://") and parts.path.strip("/"):
        dbs.append(unquote(parts.path).strip("/"))
    return any(name not in PLAIN_OPTIONS for name in options) or any(
        not (db.isascii() and db.isdigit()) for db in dbs)


@given(url=urls(ANY_SCHEME, secret=True), tail=text_without("", min_size=0))
def test_an_at_sign_after_the_host_masks_more_never_less(url: Url, tail: str) -> None:
    text = f"{url}?client_name=a@{tail}"
    shown = mask(text)
    for secret in url.secrets:
        if secret not in str(url.masked()) and secret not in tail:
            assert secret not in shown


@given(url=urls(REFUSED, secret=True))
@example(url=Url("redis+sentinels", "", "s3cr:et", "h1:26379,h2:26379", "/mymaster", []))
@example(url=Url("HTTP", "admin", "hunter2", "h", "", [], ("auth", "tok")))
def test_check_refuses_other_schemes_without_showing_the_password(url: Url) -> None:
    with pytest.raises(ConfigurationError) as refused:
        check(str(url))
    with pytest.raises(ConfigurationError) as refused_masked:
        check(str(url.masked()))
    message, expected = str(refused.value), str(refused_masked.value)
    assert message == expected  # as if the password were "***"
    for secret in url.secrets:
        if secret not in expected:  # else it is also a host, a user name, the text...
            assert secret not in message


@given(text=st.text())
@example(text="redis:/h")
@example(text="//h:1")
@example(text=" redis://h")
def test_check_refuses_text_without_a_scheme(text: str) -> None:
    head, sep, _ = text.partition("://")
    assume(not (sep and head.lower() in SCHEMES))
    with pytest.raises(ConfigurationError):
        check(text)
