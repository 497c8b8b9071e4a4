"""What can go wrong talking to Redis, named once, and what each failure means.

Everything outside ``redis/`` catches these names instead of redis-py's exceptions, so
that only this package knows which library speaks to the server. A leaf module: it
imports redis-py's exceptions and nothing of ours.

The three questions callers ask of a failure:

- ``classify(exc)``: did Redis answer no (``"refused"``: a wrong password, a missing
  permission), was nobody answering (``"unreachable"``), or is it something else?
- ``unreachable(exc)``: the same question for the admin tools, as a yes or no.
- ``maybe_ran(exc)``: a call failed; may its command have run anyway (a lost reply)?
"""

from __future__ import annotations

from typing import Final, Literal

import redis.exceptions
from redis.asyncio.sentinel import MasterNotFoundError

RedisError = redis.exceptions.RedisError
ResponseError = redis.exceptions.ResponseError
"""Redis answered with an error (a script's ``error_reply``, WRONGTYPE, OOM...)."""
NoScriptError = redis.exceptions.NoScriptError
NoPermissionError = redis.exceptions.NoPermissionError
"""An ACL user without a command or key the call needs."""
AuthenticationError = redis.exceptions.AuthenticationError
"""A wrong password (redis-py makes it a ConnectionError: say it as what it is)."""
WatchError = redis.exceptions.WatchError
ConnectionLost = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
ClusterUnreachable = redis.exceptions.RedisClusterException
"""A blocking cluster client that found no node to read the slot map from."""
Unavailable = (RedisError, OSError, ClusterUnreachable)
"""Redis away or failing over, as a call may raise it: a redis-py error, a socket's own
(``OSError``: a refused or reset connection not wrapped by redis-py), or a cluster
client without a slot map. What a worker's loops wait out and try again."""
NoMaster = MasterNotFoundError
"""No sentinel named a master: the call was never sent."""
LostReply = redis.exceptions.ConnectionError
"""A call whose reply never came: it may or may not have run (retry only what is safe
to run twice)."""

REFUSING: Final = (redis.exceptions.AuthenticationError,
                   redis.exceptions.AuthorizationError,
                   redis.exceptions.NoPermissionError)
"""Redis answered, and said no to this client."""
UNREACHABLE: Final = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                      OSError)
"""Nobody answering (yet): refused, timed out, still loading its data."""

Kind = Literal["refused", "unreachable", "other"]


def classify(exc: BaseException) -> Kind:
    """``"refused"`` (checked first: a wrong password is a ConnectionError to redis-py),
    ``"unreachable"``, or ``"other"`` (an error reply, or not Redis's at all)."""
    if isinstance(exc, REFUSING):
        return "refused"
    if isinstance(exc, UNREACHABLE):
        return "unreachable"
    return "other"


def unreachable(exc: BaseException) -> bool:
    """Is ``exc`` Redis out of reach (down, a lost link, a timeout) rather than Redis
    answering no (a wrong password, NOPERM, OOM)? What an admin should look at differs."""
    if isinstance(exc, redis.exceptions.AuthenticationError):  # a ConnectionError, but
        return False  # Redis answered: it is the password that is wrong
    return isinstance(exc, ConnectionLost)


CLOSED_TRANSPORT: Final = "the handler is closed"
"""What uvloop says (as a ``RuntimeError``) when a write finds the connection's transport
already closed by a reset from the server, where asyncio's own loop drops the write and
the read then fails as a lost connection. redis-py does not wrap it, so a worker on
uvloop whose node died under it saw a ``RuntimeError`` as a bug, and its settle loop
ended the process (the cluster master-kill test's "a worker died with the master")."""


def closed_transport(exc: BaseException) -> bool:
    """Is ``exc`` uvloop's write on a transport the server's reset already closed?"""
    return isinstance(exc, RuntimeError) and CLOSED_TRANSPORT in str(exc)


def as_lost(exc: RuntimeError, *, connecting: bool) -> redis.exceptions.ConnectionError:
    """``closed_transport(exc)`` as the lost connection it is; ``connecting``: it came
    during the handshake, before any command of the caller's was sent (so ``maybe_ran``
    says no, as it does for a refused connection)."""
    where = "connecting to the server" if connecting else "sending a command"
    return redis.exceptions.ConnectionError(f"Error {where}: the connection was closed "
                                            f"under the call ({exc})")


def maybe_ran(exc: BaseException) -> bool:
    """Whether a failed call may have run in Redis: a lost connection may have lost the
    reply, unless the connection could not even be made (redis-py says "connecting
    to" then, and no sentinel naming a master is the same: nothing was sent); an error
    reply means the script did not run. ``NotDurable`` (a ConnectionError) did run."""
    return (isinstance(exc, ConnectionLost) and not isinstance(exc, NoMaster)
            and "connecting to" not in str(exc))
