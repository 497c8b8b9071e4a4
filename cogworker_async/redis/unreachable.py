"""``RedisUnreachable``: an enqueue that found no Redis to connect to, said for a person.

redis-py's own error (``Error 111 connecting to 127.0.0.1:6379``) names neither the URL
as it was given nor where it came from, and a newcomer cannot tell a stopped server
from a mistyped ``COGWORKER_REDIS_URL``. The enqueue path translates it here, in its
``except`` branch only (no cost on a push that succeeds).

It stays a ``redis.exceptions.ConnectionError`` (and an OS ``ConnectionError``): code
that caught the raw error before catches this one. Only a connection that could not be
made is translated: nothing was sent, so the job was not enqueued. A reply lost after
the send stays redis-py's (it may have run: ``errors.maybe_ran``).
"""

from __future__ import annotations

import redis.exceptions

from cogworker_async.errors import CogworkerError
from cogworker_async.redis.errors import REFUSING, LostReply, maybe_ran
from cogworker_async.redis.urls import mask


class RedisUnreachable(CogworkerError, redis.exceptions.ConnectionError, ConnectionError):
    """No Redis answered at the URL an enqueue used: nothing was enqueued. ``url`` (its
    password masked) and ``source`` (where the URL came from) say which server."""

    def __init__(self, message: str, url: str, source: str) -> None:
        super().__init__(message)
        self.url = url
        self.source = source


def not_connected(exc: BaseException) -> bool:
    """Is ``exc`` a connection that could not be made (nothing sent), rather than a lost
    reply or a server that refused this client (a wrong password is said as itself)?"""
    return (isinstance(exc, LostReply) and not isinstance(exc, REFUSING)
            and not isinstance(exc, RedisUnreachable) and not maybe_ran(exc))


def unreachable(exc: BaseException, url: str, source: str, advice: str) -> RedisUnreachable:
    """The error to raise from ``exc`` (``not_connected``): the masked URL, its source,
    what redis-py said, and ``advice`` (what to do)."""
    shown = mask(url)
    return RedisUnreachable(f"cannot reach Redis at {shown} (the URL from {source}): "
                            f"nothing was enqueued ({exc}). {advice}", shown, source)
