"""Apps for the testing helpers' own tests: on a Redis URL that cannot be reached, so a
faked enqueue or a drained run that touched Redis fails the test at once (a connection
error) instead of passing by luck. The parity tests use the real server (``make_app``).

The plugin's fixtures (``cogworker_fake``, ``cogworker_inline``) come from its
``pytest11`` entry point, as in any project that installed the package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import pytest

from cogworker_async import App

__all__ = ["offline_app"]

NO_REDIS: Final = "unix:///nonexistent/cogworker-testing.sock"
"""A URL nothing listens on: any Redis call made with it raises ConnectionError."""


@pytest.fixture
def offline_app() -> Callable[..., App]:
    """``offline_app(**settings)``: an App whose Redis cannot be reached."""

    def make(**settings: Any) -> App:
        return App(NO_REDIS, namespace="testing-helpers", **settings)

    return make
