"""A delaying TCP proxy: every chunk of bytes, either way, is held a random 20–50 ms.

The kernel here has no netem qdisc, so added latency is a process of its own, run in the
``srv`` namespace in front of Redis:

    python -m tests.worker.chaos.netns.latency LISTEN_HOST:PORT[,HOST:PORT...] UPSTREAM_HOST:PORT \\
        MIN_MS MAX_MS READY_FILE

Each direction of each connection keeps its order: a chunk is released at its own
arrival time plus its delay, or just after the chunk before it, whichever is later (so
the delays jitter without reordering the stream, as on one TCP path). Reading stops
while ``MAX_HELD`` chunks wait, so memory stays bounded however fast a side writes.
``READY_FILE`` is created once the listeners accept. Runs until killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from pathlib import Path
from typing import Final

READ_SIZE: Final = 65536
MAX_HELD: Final = 256
"""Chunks one direction may hold before it stops reading (≤ 16 MiB)."""


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                low: float, high: float) -> None:
    held: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(MAX_HELD)

    async def release() -> None:
        while (item := await held.get()) is not None:
            due, data = item
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(data)
            await writer.drain()
        writer.write_eof()

    sender = asyncio.ensure_future(release())
    try:
        last = 0.0
        while data := await reader.read(READ_SIZE):
            last = max(last, time.monotonic() + random.uniform(low, high))
            await held.put((last, data))
        await held.put(None)
        await sender
    finally:
        sender.cancel()
        with contextlib.suppress(BaseException):
            await sender


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 upstream: tuple[str, int], low: float, high: float) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(*upstream)
    except OSError:
        writer.transport.abort()
        return
    pumps = [asyncio.ensure_future(_pump(reader, up_writer, low, high)),
             asyncio.ensure_future(_pump(up_reader, writer, low, high))]
    try:
        await asyncio.gather(*pumps)
    except (OSError, RuntimeError):  # a side went away: the other goes with it
        pass
    finally:
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        writer.transport.abort()
        up_writer.transport.abort()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main(listen: str, upstream: str, min_ms: str, max_ms: str, ready: str) -> None:
    low, high = float(min_ms) / 1000, float(max_ms) / 1000
    target = _address(upstream)
    servers = []
    for host, port in map(_address, listen.split(",")):
        servers.append(await asyncio.start_server(
            lambda r, w: _serve(r, w, target, low, high), host, port))
    Path(ready).touch()
    await asyncio.gather(*(server.serve_forever() for server in servers))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
