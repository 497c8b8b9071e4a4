"""What the sections of the admin model (``sets``, ``job_status``, ``limits``,
``run_metrics``, ``waiting``) use of the Inspector that holds them.

Named here as a protocol, not as ``api.Inspector``: ``api`` imports the sections to build
its Inspector, and a section importing ``api`` back (even for its annotations only) made
the two an import cycle. ``api.Inspector`` is the one implementation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cogworker_async.app import App
    from cogworker_async.redis.admin import Admin


class InspectorView(Protocol):
    """The Inspector as its sections see it (``api.Inspector``)."""

    @property
    def app(self) -> App: ...

    @property
    def default_queue(self) -> str:
        """Where a job whose ``queue`` field cannot be read goes."""

    def admin(self) -> Admin:
        """The Redis reads and moves behind every call, on this event loop's pool."""
