"""The metrics HTTP server: ``prometheus_client``'s own, in a thread, for one registry.

Why a thread and not the event loop: a scrape renders every series (for a worker with
many job names, a few milliseconds of CPU), which on the loop would delay jobs; and a
loop that is stuck (a job blocking it) is exactly when ``cogworker_loop_lag_seconds``
must still be readable. The server answers from its own threads; what it reads
(counters, ``Manager.vitals``) is safe to read from them.

``listen`` binds before it returns: a port in use is a ``ConfigurationError`` naming the
address, raised where the worker (or the exporter) starts, never a silent missing
endpoint. ``aclose`` stops the server and frees the port, bounded.
"""

from __future__ import annotations

import errno
import logging
import threading
from typing import Final
from wsgiref.simple_server import WSGIServer

import anyio
from prometheus_client import start_http_server
from prometheus_client.registry import Collector

from cogworker_async.errors import ConfigurationError, why

log = logging.getLogger(__name__)

CLOSE_TIMEOUT: Final = 2.0
"""Seconds closing may take (the serving loop notices a shutdown within 0.5 s, its poll
interval) before the thread is left to end on its own (it is a daemon)."""
PATH: Final = "/metrics"
"""Where Prometheus scrapes (the server answers on any path; this is the one we name)."""


class MetricsServer:
    """One listening metrics server (made by ``listen``)."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread, host: str) -> None:
        self._httpd = httpd
        self._thread = thread
        self.host = host
        self.port: int = httpd.server_address[1]
        """The bound port (the one asked for, or the one given for port 0)."""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{PATH}"

    def close(self) -> None:
        """Stop serving and free the port (blocking: call it from a thread)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(CLOSE_TIMEOUT)

    async def aclose(self) -> None:
        """``close``, shielded (it runs in cleanup) and bounded by ``CLOSE_TIMEOUT``."""
        with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
            await anyio.to_thread.run_sync(self.close, abandon_on_cancel=True)


def listen(host: str, port: int, registry: Collector) -> MetricsServer:
    """Bind ``host:port`` and serve ``registry`` from a daemon thread (blocking: it may
    resolve ``host``; call it from a thread). A port in use, an address this machine
    does not have: ``ConfigurationError`` naming them."""
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigurationError(
                f"cannot serve metrics on {host}:{port}: the port is in use (another "
                "worker's metrics port? give each process its own)") from exc
        raise ConfigurationError(f"cannot serve metrics on {host}:{port}: {why(exc)}"
                                 ) from exc
    return MetricsServer(httpd, thread, host)
