"""A small application's jobs, used by the demo (``make run``) and the README.

Run a worker on it with:  cogworker-async run examples.app:jobs
"""

from __future__ import annotations

import random

import anyio

from cogworker_async import App

jobs = App(
    namespace="cogworker-demo",
    queues=["critical", "default"],
    concurrency=20,
    retry_base_delay=0.5,  # the demo's retries come back quickly; the default is 15 s
    poll_interval=0.2,
)

_declined_once: set[int] = set()


@jobs.job()
async def make_thumbnail(image_id: int, size: int = 128) -> None:
    """Pretend to resize an image."""
    await anyio.sleep(random.uniform(0.01, 0.05))


@jobs.job(queue="critical", retry=3)
async def charge_card(order_id: int, cents: int) -> None:
    """Every tenth card is declined once, then goes through on its retry."""
    if order_id % 10 == 0 and order_id not in _declined_once:
        _declined_once.add(order_id)
        raise RuntimeError(f"card for order {order_id} declined (will retry)")
    await anyio.sleep(0.02)


@jobs.job(retry=1)
def import_feed(url: str) -> None:
    """A plain function: runs in a worker thread. This feed is broken for good."""
    raise ValueError(f"cannot parse feed at {url}")
