"""Redis Cluster URLs (``redis+cluster://``, ``rediss+cluster://``) as people write them:
``cluster_url`` reads every node (host names, IPv4, IPv6 in brackets), the credentials
(in the userinfo or the query, the query's winning) and the TLS options; it refuses an
unknown option, a database other than 0 and a node without a usable port, each time with
the password masked; and ``mask`` shows a cluster URL with ``***`` in place of every
password and nothing else changed.

URLs are built from parts, so that what they say and their masked form are known exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final
from urllib.parse import quote

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cogworker_async.errors import ConfigurationError
from cogworker_async.redis.urls import (
    CLUSTER_OPTIONS,
    CLUSTER_SCHEMES,
    MASK,
    check,
    cluster_url,
    mask,
)

CREDENTIALS: Final = ("username", "password")
TLS_OPTIONS: Final = tuple(name for name in CLUSTER_OPTIONS if name not in CREDENTIALS)
MAX_PORT: Final = 65535


def any_case(word: str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.sampled_from([c.lower(), c.upper()]) for c in word)).map("".join)


def text(*, min_size: int = 0) -> st.SearchStrategy[str]:
    """Printable text of any script, spaces and URL delimiters included (it is written
    percent-encoded)."""
    chars = st.characters(exclude_categories=("Cc", "Cs"))
    return st.text(chars, min_size=min_size, max_size=16)


def encoded(value: str) -> str:
    """``value`` as it is written in a URL: every delimiter percent-encoded."""
    return quote(value, safe="")


SCHEME: Final = st.sampled_from(CLUSTER_SCHEMES).flatmap(any_case)
HOST: Final = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9.\-]{0,20}", fullmatch=True),
    st.tuples(*[st.integers(0, 255)] * 4).map(lambda parts: ".".join(map(str, parts))),
    st.sampled_from(["::1", "fe80::1", "2001:db8::7:1", "::ffff:10.0.0.1"]),
)
"""A node's host as redis-py is handed it: an IPv6 address is written in brackets."""
NODE: Final = st.tuples(HOST, st.integers(1, MAX_PORT))
PATH: Final = st.sampled_from(["", "/", "/0"])
"""What says database 0, the only one a cluster has."""
SECRET: Final = text(min_size=1)
USER: Final = text(min_size=1)


@dataclass(frozen=True, slots=True)
class ClusterCase:
    """A cluster URL's parts: what it says, and how it is written."""

    scheme: str
    nodes: list[tuple[str, int]]
    user: str | None = None
    """In the userinfo (``user[:password]@``)."""
    password: str | None = None
    """In the userinfo."""
    query_user: str | None = None
    query_password: str | None = None
    options: dict[str, str] | None = None
    """TLS options, or anything else (refused) for the refusal tests."""
    path: str = ""
    extra_node: str | None = None
    """Written as is after the nodes (the refusal tests' bad node)."""
    masked_password: bool = False
    """Written with ``***`` for each password (``mask``'s output)."""

    def __str__(self) -> str:
        def secret(value: str) -> str:
            return MASK if self.masked_password else encoded(value)

        userinfo = ""
        if self.user is not None or self.password is not None:
            userinfo = encoded(self.user or "")
            userinfo += f":{secret(self.password)}" if self.password is not None else ""
            userinfo += "@"
        hosts = ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                         for host, port in self.nodes)
        hosts += "" if self.extra_node is None else f",{self.extra_node}"
        pairs = []
        if self.query_user is not None:
            pairs.append(f"username={encoded(self.query_user)}")
        if self.query_password is not None:
            pairs.append(f"password={secret(self.query_password)}")
        pairs += [f"{encoded(k)}={encoded(v)}" for k, v in (self.options or {}).items()]
        query = "?" + "&".join(pairs) if pairs else ""
        return f"{self.scheme}://{userinfo}{hosts}{self.path}{query}"

    def masked(self) -> ClusterCase:
        return replace(self, masked_password=True)

    @property
    def secrets(self) -> list[str]:
        """Each password as it is written and as it is meant."""
        found = [s for s in (self.password, self.query_password) if s]
        return found + [encoded(s) for s in found]

    def hidden(self, shown: str) -> None:
        """No password is in ``shown`` (unless it is also part of the masked URL: a
        host, a user name, a word of the message)."""
        expected = str(self.masked())
        for secret in self.secrets:
            if secret not in expected and secret not in MESSAGE_WORDS:
                assert secret not in shown, (secret, shown)


MESSAGE_WORDS: Final = (
    "unknown option in Redis Cluster URL use malformed list the nodes as host:port separated "
    "by commas has only database 0 " + ", ".join(CLUSTER_OPTIONS))
"""Words of ``cluster_url``'s refusals: a password that is one of them is not looked for."""


@st.composite
def cluster_cases(draw: st.DrawFn) -> ClusterCase:
    """A valid cluster URL: one to four nodes, credentials in the userinfo, the query,
    both or neither, and any of the TLS options."""
    where = draw(st.sampled_from(["none", "userinfo", "query", "both", "user only"]))
    case = ClusterCase(draw(SCHEME), draw(st.lists(NODE, min_size=1, max_size=4)),
                       path=draw(PATH))
    if where in ("userinfo", "both"):
        case = replace(case, user=draw(st.none() | USER), password=draw(SECRET))
    if where == "user only":
        case = replace(case, user=draw(USER))
    if where in ("query", "both"):
        case = replace(case, query_user=draw(st.none() | USER), query_password=draw(SECRET))
    if case.scheme.lower() != "rediss+cluster":
        return case  # TLS options without TLS are refused (test below)
    options = draw(st.dictionaries(st.sampled_from(TLS_OPTIONS), text(), max_size=3))
    return replace(case, options=options)


@given(case=cluster_cases())
@example(case=ClusterCase("redis+cluster", [("10.0.0.1", 7000), ("10.0.0.2", 7001),
                                            ("10.0.0.3", 7002)], "app", "s3:cr@t/?#"))
@example(case=ClusterCase("REDISS+CLUSTER", [("::1", 7000), ("2001:db8::7:1", 7001)],
                          query_user="app", query_password="p&q=r+s",
                          options={"ssl_ca_certs": "/etc/ca.pem",
                                   "ssl_check_hostname": "false"}, path="/0"))
@example(case=ClusterCase("redis+cluster", [("h", 1)], "u", "old", "q", "new"))
def test_cluster_url_reads_nodes_credentials_and_options(case: ClusterCase) -> None:
    url = str(case)
    parsed = cluster_url(url)
    assert parsed.nodes == tuple(case.nodes)
    assert parsed.tls == (case.scheme.lower() == "rediss+cluster")
    # The query's credentials win over the userinfo's.
    assert parsed.username == (case.query_user if case.query_user is not None
                               else case.user)
    assert parsed.password == (case.query_password if case.query_password is not None
                               else case.password)
    assert parsed.options == (case.options or {})
    assert check(url) == case.scheme.lower() + url[len(case.scheme):]


def test_tls_options_without_tls_are_refused_with_the_password_masked() -> None:
    url = "redis+cluster://u:hunter2@h1:7000,h2:7001?ssl_ca_certs=/etc/ca.pem"
    with pytest.raises(ConfigurationError, match="rediss\\+cluster") as refused:
        check(url)
    assert "hunter2" not in str(refused.value)


@given(case=cluster_cases())
@example(case=ClusterCase("rediss+cluster", [("::1", 7000), ("h2", 7001)], "u", "p@ss:w",
                          query_password="x=y", options={"ssl_certfile": "/c.pem"}))
def test_mask_hides_every_password_of_a_cluster_url_and_nothing_else(
        case: ClusterCase) -> None:
    shown = mask(str(case))
    assert shown == str(case.masked())
    case.hidden(shown)


UNKNOWN_OPTION: Final = st.one_of(
    st.sampled_from(["db", "timeout", "pass", "pwd", "auth", "PASSWORD", "Username",
                     "ssl", "decode_responses"]),
    st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
).filter(lambda name: name not in CLUSTER_OPTIONS)


@given(case=cluster_cases(), name=UNKNOWN_OPTION, value=text())
@example(case=ClusterCase("redis+cluster", [("h", 7000)], "u", "hunter2"),
         name="PASSWORD", value="hunter3")
@example(case=ClusterCase("redis+cluster", [("h", 7000)], query_password="hunter2"),
         name="db", value="1")
def test_an_unknown_option_is_refused_with_the_password_masked(
        case: ClusterCase, name: str, value: str) -> None:
    case = replace(case, options={**(case.options or {}), name: value})
    with pytest.raises(ConfigurationError, match="unknown option") as refused:
        check(str(case))
    message = str(refused.value)
    assert repr(name) in message
    case.hidden(message)
    with pytest.raises(ConfigurationError) as masked:  # as if each password were "***"
        check(str(case.masked()))
    assert str(masked.value) == message


@given(case=cluster_cases(),
       path=st.one_of(st.integers(1, 10**6).map(lambda db: f"/{db}"),
                      st.from_regex(r"/[a-z0-9]{1,8}", fullmatch=True).filter(
                          lambda p: p.strip("/") != "0")))
@example(case=ClusterCase("redis+cluster", [("h", 7000)], "u", "hunter2"), path="/1")
@example(case=ClusterCase("rediss+cluster", [("::1", 7000)], query_password="pw"), path="/15/")
def test_a_database_other_than_0_is_refused_with_the_password_masked(
        case: ClusterCase, path: str) -> None:
    case = replace(case, path=path)
    with pytest.raises(ConfigurationError, match="only database 0") as refused:
        check(str(case))
    case.hidden(str(refused.value))


BAD_NODES: Final = ("h", "h:", ":7000", "h:0", f"h:{MAX_PORT + 1}", "h:-1", "h:+1", "h:70 00",
                    "h:port", "[::1]", "[::1]:", "", "h:\u00b2", "h:\u0667\u0660\u0660\u0660",
                    "::1", "fe80::1:7000")
"""Nodes without a usable port: none, 0 or past 65535, not ASCII digits (``²`` is a digit
to ``str.isdigit`` but not to ``int``; ``٧٠٠٠`` is 7000 to both, but no one writes a port
so), or an IPv6 address out of brackets, which has no one reading (``::1`` would be host
``:`` port 1)."""


@given(case=cluster_cases(), node=st.sampled_from(BAD_NODES))
@example(case=ClusterCase("redis+cluster", [("h", 7000)], "u", "hunter2"), node="h:\u00b2")
@example(case=ClusterCase("redis+cluster", [("h", 7000)], "u", "hunter2"), node="::1")
def test_a_node_without_a_usable_port_is_refused_with_the_password_masked(
        case: ClusterCase, node: str) -> None:
    case = replace(case, extra_node=node)
    with pytest.raises(ConfigurationError, match="malformed Redis Cluster URL") as refused:
        check(str(case))
    case.hidden(str(refused.value))
