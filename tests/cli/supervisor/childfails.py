"""An App that imports in the supervisor but not in its children (only they have a
supervisor): a child that cannot start, for tests/cli/supervisor/test_supervisor.py."""

from __future__ import annotations

from cogworker_async import App, environment

if environment.supervisor():
    raise RuntimeError("this App refuses to start under a supervisor")

jobs = App("redis://127.0.0.1:1/0")
