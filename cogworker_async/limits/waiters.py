"""The callers waiting on one batched call (``worker/acks.py``, ``limits/calls.py``): each
waits on a future that is the last item of its entry, settled once the call is done."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any


def settle_all(waiting: Sequence[tuple[Any, ...]], exc: Exception | None) -> None:
    """Each entry's future (its last item): done, or failed with ``exc``; a future
    settled already (its caller gave up) is left as it is."""
    for *_, done in waiting:
        future: asyncio.Future[Any] = done
        if future.done():
            continue
        if exc is None:
            future.set_result(None)
        else:
            future.set_exception(exc)
