#!/usr/bin/env python3
"""A loopback TCP proxy that delays every chunk by a fixed time in each direction
(standard library only): Redis as if it were a few milliseconds away, without netem.

    python benchmarks/rtt_proxy.py --target-port 6379 [--delay-ms 2] [--port 0]

It listens on 127.0.0.1 (a free port unless ``--port``), prints ``{"port": N}`` on one
line of stdout once it listens, and forwards each connection to 127.0.0.1:<target-port>
until it is stopped (SIGTERM or SIGINT). Each direction of each connection keeps a queue
of (due time, bytes): a chunk read at t is written at t + delay, after every chunk read
before it (order kept per direction; chunks due together go in one write). It forwards
bytes, not commands, so anything Redis speaks passes: pipelines, blocking calls, pub/sub.
A side's close reaches the other side after the delay, once what was queued before it
went out. Backpressure: a side whose peer's write buffer is full stops being read.
``run.py``'s ``noop_rtt`` scenario runs every system's worker (and its prefill) through
it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import sys


class Half(asyncio.Protocol):
    """One side of a proxied connection: what it reads goes, delayed, to its ``peer``."""

    def __init__(self, delay: float, target_port: int | None = None) -> None:
        self.delay = delay
        self.target_port = target_port
        """A client's side: the port to connect its upstream side to."""
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer: Half | None = None
        self.outbox: collections.deque[tuple[float, bytes | None]] = collections.deque()
        """What this side is to write: (due time, bytes; None: close), in order."""
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.target_port is not None:  # not read until its upstream side is up
            transport.pause_reading()
            self.connecting = self.loop.create_task(self.connect(self.target_port))

    async def connect(self, port: int) -> None:
        assert self.transport is not None
        try:
            _, upstream = await self.loop.create_connection(lambda: Half(self.delay),
                                                            "127.0.0.1", port)
        except OSError:
            self.transport.close()
            return
        if self.transport.is_closing():
            assert upstream.transport is not None
            upstream.transport.close()
            return
        self.peer, upstream.peer = upstream, self
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            self.peer.send(data)

    def eof_received(self) -> bool:
        if self.peer is not None:
            self.peer.send(None)
        return True  # half open: what is queued for this side still goes out

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.outbox.clear()
        peer, self.peer = self.peer, None
        if peer is not None and peer.peer is self:
            peer.peer = None
            peer.send(None)

    # -- the delayed writes ------------------------------------------------------------

    def send(self, data: bytes | None) -> None:
        """Queue ``data`` (None: close) to be written one delay from now."""
        self.outbox.append((self.loop.time() + self.delay, data))
        if self.timer is None:
            self.timer = self.loop.call_at(self.outbox[0][0], self.flush)

    def flush(self) -> None:
        self.timer = None
        if self.transport is None or self.transport.is_closing():
            self.outbox.clear()
            return
        now = self.loop.time()
        chunks = []
        closing = False
        while self.outbox and self.outbox[0][0] <= now:
            _, data = self.outbox.popleft()
            if data is None:
                closing = True
                break
            chunks.append(data)
        if chunks:
            self.transport.write(b"".join(chunks))
        if closing:
            self.outbox.clear()
            self.transport.close()
            return
        if self.outbox:
            self.timer = self.loop.call_at(self.outbox[0][0], self.flush)

    # -- backpressure: a full write buffer here pauses reading the peer -----------------

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


async def serve(target_port: int, delay: float, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Half(delay, target_port), "127.0.0.1", port)
    bound = server.sockets[0].getsockname()[1]
    sys.stdout.write(json.dumps({"port": bound, "delay_ms": 1000 * delay}) + "\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=2.0,
                        help="added to each chunk in each direction (default 2)")
    parser.add_argument("--port", type=int, default=0, help="to listen on (default: free)")
    args = parser.parse_args()
    asyncio.run(serve(args.target_port, args.delay_ms / 1000, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
