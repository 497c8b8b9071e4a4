"""Redis URLs: which schemes are accepted, and how a URL is shown to people.

A URL carries the password (``redis://user:secret@host``, or ``?password=secret``), and
every message that shows one ends up in a terminal, a CI log or an error tracker: it is
always shown through ``mask``. Schemes are case-insensitive (RFC 3986): ``REDIS://h`` is
accepted and handed on as ``redis://h``.
"""

from __future__ import annotations

import re
from typing import Final

from cogworker_async.errors import ConfigurationError

SCHEMES: Final = ("redis", "rediss", "unix")
"""The schemes a worker, an enqueuer, the dashboard and the admin CLI connect with."""

MASK: Final = "***"

_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://", re.ASCII)
# userinfo is everything before the last '@' of the authority; the password is after the
# first ':' in it. Parsed by hand: urllib refuses "h1:1,h2:2" (several hosts) as a port.
_SECRET_QUERY: Final = re.compile(r"(?i)([?&](?:password|pass|pwd|auth)=)[^&#]*")


def mask(url: str) -> str:
    """``url`` with any password replaced by ``***`` (user names stay: they help)."""
    text = str(url)
    found = _SCHEME.match(text)
    head, rest = (text[: found.end()], text[found.end():]) if found else ("", text)
    authority_end = len(rest)
    for stop in "/?#":
        at = rest.find(stop)
        if at != -1:
            authority_end = min(authority_end, at)
    authority, tail = rest[:authority_end], rest[authority_end:]
    userinfo, sep, hosts = authority.rpartition("@")
    if sep:
        user, colon, _password = userinfo.partition(":")
        authority = f"{user}{colon}{MASK if colon else ''}@{hosts}"
    return head + authority + _SECRET_QUERY.sub(lambda m: m.group(1) + MASK, tail)


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
    return scheme + url[len(scheme):]
