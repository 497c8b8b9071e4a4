"""Redis URLs: which schemes are accepted, and how a URL is shown to people.

A URL carries the password (``redis://user:secret@host``, or ``?password=secret``), and
every message that shows one ends up in a terminal, a CI log or an error tracker: it is
always shown through ``mask``. Schemes are case-insensitive (RFC 3986): ``REDIS://h`` is
accepted and handed on as ``redis://h``.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit

from cogworker_async.errors import ConfigurationError

SCHEMES: Final = ("redis", "rediss", "unix")
"""The schemes a worker, an enqueuer, the dashboard and the admin CLI connect with."""

MASK: Final = "***"

_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://", re.ASCII)
_HEAD: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:/*", re.ASCII)
_SECRET_QUERY: Final = re.compile(r"(?i)([?&](?:password|pass|pwd|auth)=)[^&#]*")


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
    try:
        urlsplit(checked).port  # noqa: B018 - parsed for its ValueError only
    except ValueError:  # often a password holding '/', '[' or ']': the client fails too
        raise ConfigurationError(
            # Not the parser's own message: it quotes the would-be port, the password.
            f"malformed Redis URL {mask(url)!r} (its host or port cannot be read): "
            "percent-encode '/', '?', '#', '@', '[' and ']' in a password (e.g. '/' as %2F)"
        ) from None
    return checked
