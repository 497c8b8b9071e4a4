"""An App with dead-set limits of its own, for ``stats``: ``tests.cli.limitsapp:jobs``
(made when asked for, on ``$ADMIN_NAMESPACE``, as in ``adminapp``)."""

from __future__ import annotations

import os
from typing import Final

from cogworker_async import App
from tests.cli import adminapp

TARGET: Final = "tests.cli.limitsapp:jobs"
DEAD_MAX_JOBS: Final = 1234
DEAD_MAX_AGE: Final = 7 * 86_400.0
"""Seconds: a week."""


def __getattr__(name: str) -> App:
    if name == "jobs" and adminapp.NAMESPACE_ENV in os.environ:
        return adminapp.build(os.environ[adminapp.NAMESPACE_ENV], dead_max_jobs=DEAD_MAX_JOBS,
                              dead_max_age=DEAD_MAX_AGE).app
    raise AttributeError(name)
