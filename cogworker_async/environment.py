"""The environment variables cogworker-async reads, all of them, and nowhere else.

| variable | read by | meaning |
|---|---|---|
| ``COGWORKER_REDIS_URL`` | App, the CLI | the Redis URL when ``App(redis_url=...)`` gives none |
| ``COGWORKER_DATA_DIR`` | the embedded server | its data dir (default ``./.cogworker``) |
| ``COGWORKER_REDIS_SERVER`` | the embedded server | the server binary to run |
| ``COGWORKER_EMBEDDED_REGISTRY`` | the embedded server | the list of servers this user started |
| ``XDG_CACHE_HOME``, ``HOME`` | the embedded server | where that list is by default |
| ``PYTEST_CURRENT_TEST`` | the embedded server | set: a test's (no notice of a start) |
| ``COGWORKER_WEB_AUTH`` | ``cogworker-async web`` | ``user:password`` for basic auth |
| ``COGWORKER_SUPERVISOR`` | ``run`` | set by ``run --processes``: a child's supervisor |
| ``COGWORKER_CHILD_REDIS_URL`` | ``run`` | set by ``run --processes``: a child's URL |
| ``COGWORKER_READY_FD`` | ``run`` | set by ``run --processes``: where a child says it started |

Each is read when it is needed (not at import), so a process that sets one before its
first enqueue or its first worker is seen to have set it.
"""

from __future__ import annotations

import os
from typing import Final

REDIS_URL: Final = "COGWORKER_REDIS_URL"
DATA_DIR: Final = "COGWORKER_DATA_DIR"
REDIS_SERVER: Final = "COGWORKER_REDIS_SERVER"
EMBEDDED_REGISTRY: Final = "COGWORKER_EMBEDDED_REGISTRY"
WEB_AUTH: Final = "COGWORKER_WEB_AUTH"
SUPERVISOR: Final = "COGWORKER_SUPERVISOR"
CHILD_REDIS_URL: Final = "COGWORKER_CHILD_REDIS_URL"
"""The URL a supervisor resolved, for its children: in their environment (readable by
the owner only), never on their command lines (``ps`` shows those to every user)."""
READY_FD: Final = "COGWORKER_READY_FD"
"""A pipe's write end a supervisor's child writes one byte to once its worker has
started: an exit before that is a child that could not start."""

_claimed: dict[str, str | None] = {}


def redis_url() -> str | None:
    """``$COGWORKER_REDIS_URL``, or None when unset or empty."""
    return os.environ.get(REDIS_URL) or None


def data_dir() -> str | None:
    """``$COGWORKER_DATA_DIR``, or None when unset or empty."""
    return os.environ.get(DATA_DIR) or None


def redis_server() -> str | None:
    """``$COGWORKER_REDIS_SERVER``, or None when unset or empty."""
    return os.environ.get(REDIS_SERVER) or None


def embedded_registry() -> str | None:
    """``$COGWORKER_EMBEDDED_REGISTRY``, or None when unset or empty."""
    return os.environ.get(EMBEDDED_REGISTRY) or None


def cache_home() -> str | None:
    """``$XDG_CACHE_HOME``, or None when unset or empty (then ``~/.cache``)."""
    return os.environ.get("XDG_CACHE_HOME") or None


def under_test() -> bool:
    """True while pytest runs a test, in its process or one it started (it sets
    ``PYTEST_CURRENT_TEST``, which children inherit)."""
    return bool(os.environ.get("PYTEST_CURRENT_TEST"))


def web_auth() -> str | None:
    """``$COGWORKER_WEB_AUTH`` exactly as set (an empty value is not "unset": it is a
    mistake the dashboard refuses to start with), or None when unset."""
    return os.environ.get(WEB_AUTH)


def supervisor() -> str | None:
    """``$COGWORKER_SUPERVISOR`` (the ``run --processes`` supervisor of this worker), or
    None when unset or empty (or as it was when ``claim_child`` took it)."""
    if SUPERVISOR in _claimed:
        return _claimed[SUPERVISOR]
    return os.environ.get(SUPERVISOR) or None


def claim_child() -> tuple[str | None, str | None]:
    """A child of ``run --processes``: (its supervisor, the URL it was given), taken out
    of the environment so that a process the job starts (another worker, say) does not
    believe it is a child too, nor inherit the URL (nor the ready pipe: ``ready_fd``)."""
    for name in (SUPERVISOR, CHILD_REDIS_URL, READY_FD):
        if name not in _claimed:
            _claimed[name] = os.environ.pop(name, None) or None
    return _claimed[SUPERVISOR], _claimed[CHILD_REDIS_URL]


def ready_fd() -> int | None:
    """The ready pipe ``claim_child`` took from ``$COGWORKER_READY_FD``, None if none."""
    try:
        return int(_claimed.get(READY_FD) or "")
    except ValueError:
        return None


def take_ready_fd() -> int | None:
    """``ready_fd``, once: written to and closed by its taker, the number may next name
    another file, which a second say-ready must not write to."""
    fd = ready_fd()
    if READY_FD in _claimed:
        _claimed[READY_FD] = None
    return fd
