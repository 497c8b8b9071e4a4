"""Cancel scopes without the per-scope question "which event loop is this?".

``anyio.CancelScope()`` asks sniffio which library runs the current task, then builds
that backend's scope: on a no-op job, whose processor enters two scopes, that question
was a sixth of the worker's event-loop time. The worker runs on asyncio only (its acks
and batched calls are asyncio futures), so the backend's class is looked up once, on
first use inside the loop, and built directly: the same class anyio would build, with
the same arguments.
"""

from __future__ import annotations

import anyio

_scope: type[anyio.CancelScope] | None = None


def cancel_scope(*, shield: bool = False) -> anyio.CancelScope:
    """``anyio.CancelScope(shield=shield)``, built without asking for the backend."""
    global _scope
    if _scope is None:
        _scope = type(anyio.CancelScope())
    return _scope(shield=shield)
