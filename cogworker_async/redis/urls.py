"""Redis URLs: which schemes are accepted, and how a URL is shown to people.

A URL carries the password (``redis://user:secret@host``, or ``?password=secret``), and
every message that shows one ends up in a terminal, a CI log or an error tracker: it is
always shown through ``mask``. Schemes are case-insensitive (RFC 3986): ``REDIS://h`` is
accepted and handed on as ``redis://h``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qs, unquote, urlsplit

from cogworker_async.errors import ConfigurationError

SCHEMES: Final = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster",
                  "redis+sentinel", "rediss+sentinel")
"""The schemes a worker, an enqueuer, the dashboard and the admin CLI connect with."""

CLUSTER_SCHEMES: Final = ("redis+cluster", "rediss+cluster")
"""A Redis Cluster, reached through any of the listed nodes (``rediss``: TLS)."""

SENTINEL_SCHEMES: Final = ("redis+sentinel", "rediss+sentinel")
"""A master and its replicas watched by Redis Sentinel, reached through any of the
listed sentinels (``rediss``: TLS to the sentinels and the master)."""

TLS_OPTIONS: Final = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs",
                      "ssl_check_hostname")

SENTINEL_OPTIONS: Final = (*TLS_OPTIONS, "password", "username", "sentinel_username",
                           "sentinel_password")
"""Query parameters a sentinel URL may carry: the master's credentials (also given as
``user:password@``), the sentinels' own (when they require AUTH), and TLS files and
checks (used for the sentinels and the master alike)."""

CLUSTER_OPTIONS: Final = (*TLS_OPTIONS, "password", "username")
"""Query parameters a cluster URL may carry (TLS files and checks, credentials)."""

PLAIN_OPTIONS: Final = (*TLS_OPTIONS, "password", "username", "db", "client_name")
"""Query parameters a ``redis://``, ``rediss://`` or ``unix://`` URL may carry. redis-py
would take any of its connection settings from the query and let it override the
project's own: ``?decode_responses=true`` makes every reply a str, which the scripts'
callers do not expect (a worker moved every job onto its in-progress list and ran
none), and ``?socket_timeout=`` replaces the timeout that tells a lost reply from a slow
one. So only these pass; any other is refused by name."""

MASK: Final = "***"

_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://", re.ASCII)
_HEAD: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:/*", re.ASCII)
_SECRET_QUERY: Final = re.compile(
    r"(?i)([?&](?:[a-z]+_)?(?:password|pass|pwd|auth)=)[^&#]*")


def mask(url: str) -> str:
    """``url`` with any password replaced by ``***`` (user names stay: they help).

    Cautious rather than exact: the userinfo is everything before the LAST ``@`` (a
    password may hold ``/``, ``?``, ``#`` or ``@`` unencoded, which ends an authority for
    a strict parser, but not for a person pasting a secret), and when that userinfo has
    no ``:`` but holds a character a user name cannot, all of it is masked. Parsed by
    hand: urllib refuses "h1:1,h2:2" (several hosts) as a port.
    """
    text = str(url)
    found = _HEAD.match(text)
    head, rest = (text[: found.end()], text[found.end():]) if found else ("", text)
    # Query secrets first: one may hold an '@', which must not be taken for the userinfo's.
    rest = _SECRET_QUERY.sub(lambda m: m.group(1) + MASK, rest)
    userinfo, sep, tail = rest.rpartition("@")
    if sep:
        user, colon, _password = userinfo.partition(":")
        if colon:
            rest = f"{user}:{MASK}@{tail}"
        elif any(ch in user for ch in "/?#"):
            rest = f"{MASK}@{tail}"
    return head + rest


def scheme_of(url: str) -> str:
    """The URL's scheme, lower-cased (``""`` when it has none)."""
    found = _SCHEME.match(url)
    return found.group(1).lower() if found else ""


def check(url: str) -> str:
    """``url`` with its scheme lower-cased, or ``ConfigurationError`` (password masked)
    naming the schemes that work."""
    if not isinstance(url, str):
        raise ConfigurationError(f"a Redis URL must be a str, not {type(url).__name__}")
    scheme = scheme_of(url)
    if scheme not in SCHEMES:
        shown = ", ".join(f"{s}://" for s in SCHEMES)
        raise ConfigurationError(f"unsupported Redis URL {mask(url)!r}: use {shown}")
    checked = scheme + url[len(scheme):]
    if scheme in CLUSTER_SCHEMES:
        cluster_url(checked)  # for its ConfigurationError
        return checked
    if scheme in SENTINEL_SCHEMES:
        sentinel_url(checked)  # for its ConfigurationError
        return checked
    try:
        parts = urlsplit(checked)
        parts.port  # noqa: B018 - parsed for its ValueError only
    except ValueError:  # often a password holding '/', '[' or ']': the client fails too
        raise ConfigurationError(
            # Not the parser's own message: it quotes the would-be port, the password.
            f"malformed Redis URL {mask(url)!r} (its host or port cannot be read): "
            "percent-encode '/', '?', '#', '@', '[' and ']' in a password (e.g. '/' as %2F)"
        ) from None
    _check_plain(url, checked, parts.path, parts.query)
    return checked


def _check_plain(url: str, checked: str, path: str, query: str) -> None:
    """A plain URL's query options (``PLAIN_OPTIONS`` only) and database number (a
    whole number, in the path or ``?db=``): redis-py would read ``/abc`` as db 0."""
    options = _options(url, query, PLAIN_OPTIONS, "Redis URL")
    dbs = [options["db"]] if "db" in options else []
    if not checked.startswith("unix://") and path.strip("/"):
        dbs.append(unquote(path).strip("/"))
    for db in dbs:
        if not (db.isascii() and db.isdigit()):
            raise ConfigurationError(
                f"malformed Redis URL {mask(url)!r}: the database must be a number "
                f"(redis://host:port/0), not {db!r}")


@dataclass(frozen=True, slots=True)
class ClusterURL:
    """What a ``redis+cluster://[user:password@]host:port[,host:port...][?options]`` URL
    says: the nodes to ask for the cluster's layout (any one that answers will do), the
    credentials, TLS, and the options of ``CLUSTER_OPTIONS``."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool
    options: dict[str, str]


def cluster_url(url: str) -> ClusterURL:
    """``url`` read as a cluster URL; ``ConfigurationError`` (password masked) if it
    cannot be. Parsed by hand: urllib refuses several hosts."""
    scheme = scheme_of(url)
    rest = url[len(scheme) + 3:]
    rest, _, query = rest.partition("?")
    rest, _, path = rest.partition("/")
    if path.strip("/") not in ("", "0"):
        raise ConfigurationError(f"Redis Cluster has only database 0: {mask(url)!r}")
    username, password, nodes = _hosts(url, rest, "Redis Cluster URL", "nodes")
    options = _options(url, query, CLUSTER_OPTIONS, "Redis Cluster URL")
    username = options.pop("username", username)
    password = options.pop("password", password)
    tls = scheme == "rediss+cluster"
    if options and not tls:
        raise ConfigurationError(
            f"TLS options in {mask(url)!r}, which is not TLS: use rediss+cluster://")
    return ClusterURL(nodes, username, password, tls, options)


@dataclass(frozen=True, slots=True)
class SentinelURL:
    """What a ``redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]
    [?options]`` URL says: the sentinels to ask where the master of ``service`` is (any
    one that answers will do), the master's database and credentials, the sentinels'
    credentials, TLS, and the TLS options of ``TLS_OPTIONS``."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None
    sentinel_username: str | None
    sentinel_password: str | None
    tls: bool
    options: dict[str, str]


def sentinel_url(url: str) -> SentinelURL:
    """``url`` read as a sentinel URL; ``ConfigurationError`` (password masked) if it
    cannot be."""
    scheme = scheme_of(url)
    rest = url[len(scheme) + 3:]
    rest, _, query = rest.partition("?")
    rest, _, path = rest.partition("/")
    service, _, db = unquote(path).strip("/").partition("/")
    if not service or not (db == "" or (db.isascii() and db.isdigit())):
        raise ConfigurationError(
            f"malformed Redis Sentinel URL {mask(url)!r}: name the master's service after "
            "the sentinels, and a database number after it if not 0 "
            "(redis+sentinel://host:26379,host:26380/mymaster/0)")
    username, password, sentinels = _hosts(url, rest, "Redis Sentinel URL", "sentinels")
    options = _options(url, query, SENTINEL_OPTIONS, "Redis Sentinel URL")
    username = options.pop("username", username)
    password = options.pop("password", password)
    sentinel_username = options.pop("sentinel_username", None)
    sentinel_password = options.pop("sentinel_password", None)
    tls = scheme == "rediss+sentinel"
    if options and not tls:
        raise ConfigurationError(
            f"TLS options in {mask(url)!r}, which is not TLS: use rediss+sentinel://")
    return SentinelURL(sentinels, service, int(db or 0), username, password,
                       sentinel_username, sentinel_password, tls, options)


def _hosts(url: str, rest: str, what: str, named: str
           ) -> tuple[str | None, str | None, tuple[tuple[str, int], ...]]:
    """(user, password, ``(host, port)`` pairs) of ``[user:password@]host:port,...``."""
    userinfo, at, hosts = rest.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    nodes = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        host = host.strip()
        bracketed = host.startswith("[") and host.endswith("]")
        if (not colon or not host or (":" in host and not bracketed)
                or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536):
            raise ConfigurationError(
                f"malformed {what} {mask(url)!r}: list the {named} as host:port "
                "separated by commas")
        nodes.append((host.strip("[]"), int(port)))
    return username, password, tuple(nodes)


def _options(url: str, query: str, known: tuple[str, ...], what: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for name, values in parse_qs(query, keep_blank_values=True).items():
        if name not in known:
            raise ConfigurationError(
                f"unknown option {name!r} in {what} {mask(url)!r}: use {', '.join(known)}")
        options[name] = values[-1]
    return options
