"""What ``saq saq_app.settings`` imports: SAQ's settings dict (its documented form:
``queue``, ``functions``, ``concurrency``) with the jobs of ``saq_peer.py``.

``saq``'s CLI creates a plain asyncio loop (``asyncio.new_event_loop()``, after importing
this module): uvloop's policy is set here, as a SAQ user can, so that every asyncio
system runs on uvloop.
"""

from __future__ import annotations

import asyncio

import common
import uvloop
from saq import Queue
from saq_peer import noop, probe, sleep

asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

_ARGS = common.app_args()
settings = {
    "queue": Queue.from_url(_ARGS.redis_url),
    "functions": [noop, sleep, probe],
    "concurrency": _ARGS.concurrency,
}
