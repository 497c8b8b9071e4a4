"""What ``streaq run streaq_app:worker`` imports: the ``Worker`` of ``streaq_peer.py``
(same tasks, ``concurrency`` = the benchmark's; streaq's default is 16) with signal
handling on, as its CLI expects, and uvloop through its documented
``anyio_kwargs={"use_uvloop": True}``.

streaq's CLI configures logging at INFO (a line per task start and end) with no option
for less; the lifespan raises its logger to WARNING once that is done, as every system
logs here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import common
from streaq_peer import StreaqPeer


@asynccontextmanager
async def _quiet_logs() -> AsyncIterator[None]:
    logging.getLogger("streaq").setLevel(logging.WARNING)
    yield


worker = StreaqPeer(common.app_args(), handle_signals=True, lifespan=_quiet_logs,
                    anyio_kwargs={"use_uvloop": True}).app
