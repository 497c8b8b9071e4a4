"""The demo behind ``make run``: enqueue a batch, work it in this process, show progress.

With no COGWORKER_REDIS_URL it starts the embedded server (data in ./.cogworker), which
keeps running after the demo, so that the dashboard command it prints at the end shows
what the demo did.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cogworker_async import Inspector
from examples.app import charge_card, import_feed, jobs, make_thumbnail

THUMBNAILS = 300
ORDERS = 50
BAR = 30


async def counts(insp: Inspector) -> tuple[int, int, int, int]:
    """(waiting, retrying, dead, processed) read from Redis, through the admin model."""
    queues = await insp.queues.infos(jobs.settings.queue_names)
    return (sum(q.size for q in queues), await insp.retries.size(), await insp.dead.size(),
            (await insp.stats.totals()).processed)


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    print(f"Redis: {jobs.redis_url()}")
    insp = Inspector(jobs)
    for queue in jobs.settings.queue_names:
        await insp.queue(queue).clear()
    await insp.retries.delete_all()
    await insp.dead.delete_all()
    await insp.stats.reset()
    started = time.monotonic()
    await make_thumbnail.enqueue_many([((i,), {"size": 256}) for i in range(THUMBNAILS)])
    for order in range(1, ORDERS + 1):
        await charge_card.enqueue(order, cents=100 * order)
    await import_feed.enqueue("https://example.com/broken.xml")
    total = THUMBNAILS + ORDERS + 1
    print(f"Enqueued {total} jobs ({THUMBNAILS} thumbnails, {ORDERS} payments, 1 broken "
          "feed import); working them with 20 concurrent processors...")
    async with jobs.worker():
        while True:
            waiting, retrying, dead, processed = await counts(insp)
            # Separate reads, not one snapshot: a job moving from its queue to the retry
            # set between them is counted in both.
            done = max(0, total - waiting - retrying)
            filled = BAR * done // total
            print(f"\r[{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} settled, "
                  f"{retrying} waiting to retry, {dead} dead ", end="", flush=True)
            if waiting == 0 and retrying == 0 and dead >= 1 and processed >= total:
                break
            await anyio.sleep(0.2)
    print(f"\nDone in {time.monotonic() - started:.1f}s: every job ran, the declined payments "
          "succeeded on retry, and the broken feed import is dead:")
    [entry] = (await insp.dead.page(1, size=1)).items
    print(f"  {entry.name} {entry.jid}: {entry.error_class}: {entry.error_message}")
    print(*ending(jobs.redis_url()), sep="\n")
    await jobs.close()


def ending(url: str) -> list[str]:
    """The last lines: how to look at it all, and (embedded) how to stop the server."""
    cli = Path(sys.executable).parent / "cogworker-async"
    here = os.path.relpath(cli) if cli.exists() else "cogworker-async"
    lines = ["Open the dashboard (then http://127.0.0.1:8000):",
             f"  {here} web examples.app:jobs"]
    if url.startswith("unix://"):
        lines += ["The embedded server keeps running, with the demo's jobs, until:",
                  f"  {here} embedded stop"]
    return lines


if __name__ == "__main__":
    anyio.run(main)
